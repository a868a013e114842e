"""Identity and witness: what makes two deliveries the same message, and the same content."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from oncebox.formats.codec import Codec, Decoded
from oncebox.formats.invalid import Invalid


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Identity:
    """``identity`` decides sameness; ``witness`` (SHA-256 of canonical content) decides
    duplicate against conflict. ``digest`` is what a tombstone keeps of the identity."""

    identity: str
    witness: str

    @property
    def digest(self) -> str:
        return sha256_hex(self.identity.encode("utf-8"))

    @property
    def digest_bytes(self) -> bytes:
        """The identity's SHA-256: what stores key records by."""
        return hashlib.sha256(self.identity.encode("utf-8")).digest()


def identify(codec: Codec, decoded: Decoded) -> Identity:
    witness = sha256_hex(decoded.content)
    if codec.identity == "content":
        return Identity(identity=witness, witness=witness)
    if not decoded.key:
        raise Invalid("missing_identity", f"codec {codec.name} gave no identity key")
    return Identity(identity=decoded.key, witness=witness)
