"""``keyed``: an opaque payload identified by the transport's key.

For integrations whose sender names each message (a queue's message id, a webhook's
delivery id): the key is the identity and the exact bytes are the witness, so the same
key with other bytes is a conflict, never an overwrite. Nothing about the body is read.
A keyed inbox may declare how its webhook sender signs; the verified message id is then
the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from oncebox.errors import ConfigError
from oncebox.formats.codec import (
    NO_FIELDS,
    Decoded,
    Delivery,
    IdentityMode,
    check_settings,
    decoded_of,
)
from oncebox.formats.invalid import Invalid
from oncebox.formats.webhook_config import WebhookConfig

MAX_BYTES = 1_048_576
MISSING_KEY = "missing_key"


class KeyedCodec:
    name = "keyed"
    identity: IdentityMode = "key"
    max_bytes = MAX_BYTES
    field_names: frozenset[str] = frozenset()  # nothing about the body is read
    needs_key = True  # a webhook's verified message id, or a token's Oncebox-Key

    def __init__(self, webhook: WebhookConfig | None = None) -> None:
        if webhook is not None and webhook.default_identity != "key":
            raise ConfigError(
                f"codec keyed: a {webhook.scheme} webhook sends no message id to key by; "
                f'use codec "json" (identified by the event\'s /id)'
            )
        self.webhook = webhook
        # A webhook inbox takes what its sender sends (webhooks.DEFAULT_MAX_BYTES).
        self.max_bytes = MAX_BYTES if webhook is None else webhook.max_bytes

    @property
    def settings(self) -> dict[str, Any]:
        if self.webhook is None:
            return {}
        return {"max_bytes": self.max_bytes, "webhook": self.webhook.describe()}

    def configure(self, settings: Mapping[str, Any], webhook: WebhookConfig | None) -> KeyedCodec:
        check_settings(self.name, settings, frozenset())
        return KeyedCodec(webhook)

    def decode(self, delivery: Delivery) -> Decoded:
        if not delivery.key:
            raise Invalid(MISSING_KEY, "a keyed delivery needs its key (Oncebox-Key, or 'key')")
        return decoded_of((delivery.body, delivery.key, NO_FIELDS, None))
