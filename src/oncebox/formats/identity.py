"""Identity and witness: what makes two deliveries the same message, and the same content."""

from __future__ import annotations

import hashlib
from functools import partial
from typing import NamedTuple

from oncebox.formats.codec import Codec, Decoded
from oncebox.formats.invalid import Invalid


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Identity(NamedTuple):
    """``identity`` decides sameness; ``witness`` (SHA-256 of canonical content) decides
    duplicate against conflict. ``digest`` is what a tombstone keeps of the identity.

    ``digest_bytes`` and ``witness_bytes`` are the same two digests as bytes, what stores
    key and compare by; :func:`identify` computes each hash once."""

    identity: str
    witness: str
    digest_bytes: bytes = b""
    witness_bytes: bytes = b""

    @property
    def digest(self) -> str:
        return (self.digest_bytes or _sha256(self.identity.encode("utf-8"))).hex()


# An Identity from all four of its fields at C speed (a named tuple's own __new__ is
# Python): every delivery makes one.
_identity = partial(tuple.__new__, Identity)


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def identify(codec: Codec, decoded: Decoded) -> Identity:
    sha256 = hashlib.sha256
    witness = sha256(decoded.content).digest()
    witness_hex = witness.hex()
    identity = witness_hex if codec.identity == "content" else decoded.key
    if not identity:
        raise Invalid("missing_key", f"codec {codec.name} gave no identity key")
    ident = sha256(identity.encode("utf-8")).digest()
    if "\x00" in identity:  # PostgreSQL holds no NUL in text: refused on every backend
        raise Invalid("bad_key", f"codec {codec.name} gave an identity key holding a NUL")
    return _identity((identity, witness_hex, ident, witness))
