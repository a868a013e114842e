"""Pure formats: codecs, canonical JSON, cksum and identity. No I/O lives here."""

from oncebox.formats.codec import (
    Codec,
    Decoded,
    Delivery,
    Overflow,
    Oversize,
    Unreadable,
    codec_family,
    codec_names,
    codec_settings,
    configure,
    get_codec,
    needs_key,
    read_bounded,
    register,
)
from oncebox.formats.feed import FeedCodec
from oncebox.formats.identity import Identity, identify
from oncebox.formats.invalid import Invalid
from oncebox.formats.json_codec import JsonCodec
from oncebox.formats.json_event import JsonEventCodec
from oncebox.formats.keyed import KeyedCodec
from oncebox.formats.sp_api import SpApiListingCodec
from oncebox.formats.ussd_h1 import UssdH1Codec
from oncebox.formats.webhook_config import WebhookConfig, parse_webhook
from oncebox.formats.webhooks import Unverified, Verified

register(JsonEventCodec())
register(UssdH1Codec())
register(FeedCodec())
register(KeyedCodec())
register(JsonCodec())
register(SpApiListingCodec())

__all__ = [
    "Codec",
    "Decoded",
    "Delivery",
    "FeedCodec",
    "Identity",
    "Invalid",
    "JsonCodec",
    "JsonEventCodec",
    "KeyedCodec",
    "Overflow",
    "Oversize",
    "SpApiListingCodec",
    "Unreadable",
    "Unverified",
    "UssdH1Codec",
    "Verified",
    "WebhookConfig",
    "codec_family",
    "codec_names",
    "codec_settings",
    "configure",
    "get_codec",
    "identify",
    "needs_key",
    "parse_webhook",
    "read_bounded",
    "register",
]
