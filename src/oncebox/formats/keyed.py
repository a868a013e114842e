"""``keyed``: an opaque payload identified by the transport's key.

For integrations whose sender names each message (a queue's message id, a webhook's
delivery id): the key is the identity and the exact bytes are the witness, so the same
key with other bytes is a conflict, never an overwrite. Nothing about the body is read.
"""

from __future__ import annotations

from oncebox.formats.codec import Decoded, Delivery, IdentityMode
from oncebox.formats.invalid import Invalid

MAX_BYTES = 1_048_576
MISSING_KEY = "missing_key"


class KeyedCodec:
    name = "keyed"
    identity: IdentityMode = "key"
    max_bytes = MAX_BYTES

    def decode(self, delivery: Delivery) -> Decoded:
        if not delivery.key:
            raise Invalid(MISSING_KEY, "a keyed delivery needs its key (Oncebox-Key, or 'key')")
        return Decoded(content=delivery.body, key=delivery.key)
