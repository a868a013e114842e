"""``feed``: an opaque payload whose identity is its content (docs/codecs.md#feed).

The snapshot id a row is exported under is provenance, not identity: the same payload
re-exported under a new snapshot is the same record. Leases fence this codec's inboxes.
"""

from __future__ import annotations

from oncebox.formats.codec import Decoded, Delivery, IdentityMode
from oncebox.formats.invalid import Invalid

MAX_BYTES = 1_048_576


class FeedCodec:
    name = "feed"
    identity: IdentityMode = "content"
    max_bytes = MAX_BYTES
    fenced = True
    field_names = frozenset({"snapshot_id"})

    def decode(self, delivery: Delivery) -> Decoded:
        if len(delivery.body) > MAX_BYTES:
            raise Invalid("too_large", f"{len(delivery.body)} bytes exceeds {MAX_BYTES}")
        if not delivery.body:
            raise Invalid("bad_format", "an empty payload is not a feed row")
        return Decoded(content=delivery.body, fields={"snapshot_id": delivery.snapshot_id})
