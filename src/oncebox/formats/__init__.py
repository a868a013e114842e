"""Pure formats: codecs, canonical JSON, cksum and identity. No I/O lives here."""

from oncebox.formats.codec import (
    Codec,
    Decoded,
    Delivery,
    Unreadable,
    codec_names,
    get_codec,
    register,
)
from oncebox.formats.feed import FeedCodec
from oncebox.formats.identity import Identity, identify
from oncebox.formats.invalid import Invalid
from oncebox.formats.json_event import JsonEventCodec
from oncebox.formats.keyed import KeyedCodec
from oncebox.formats.ussd_h1 import UssdH1Codec

register(JsonEventCodec())
register(UssdH1Codec())
register(FeedCodec())
register(KeyedCodec())

__all__ = [
    "Codec",
    "Decoded",
    "Delivery",
    "FeedCodec",
    "Identity",
    "Invalid",
    "JsonEventCodec",
    "KeyedCodec",
    "Unreadable",
    "UssdH1Codec",
    "codec_names",
    "get_codec",
    "identify",
    "register",
]
