"""POSIX ``cksum``: the CRC the USSD field adapter puts in every H1 trailer.

This is not CRC-32 as zlib computes it: POSIX feeds the bytes most-significant-bit
first through polynomial 0x04C11DB7 from a zero register, then the message length
(least significant byte first, no trailing zeros), and complements the result. It must
agree with the ``cksum`` utility byte for byte.

:func:`cksum` gets the same value from zlib's CRC-32 at C speed: that is the same CRC
with every bit order reflected, so reflecting each input byte in and the register out
turns one into the other. :func:`cksum_bitwise` is the definition, kept as the reference.
"""

from __future__ import annotations

import zlib

_POLY = 0x04C11DB7


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte << 24
        for _ in range(8):
            crc = ((crc << 1) ^ _POLY) if crc & 0x80000000 else (crc << 1)
        table.append(crc & 0xFFFFFFFF)
    return table


_TABLE = _table()


def _feed(crc: int, data: bytes | bytearray) -> int:
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFFFF) ^ _TABLE[(crc >> 24) ^ byte]
    return crc


def cksum_bitwise(data: bytes) -> int:
    """The 32-bit value ``cksum`` prints first for ``data``, byte by byte in Python."""
    crc = _feed(0, data)
    length = len(data)
    suffix = bytearray()
    while length:
        suffix.append(length & 0xFF)
        length >>= 8
    return ~_feed(crc, suffix) & 0xFFFFFFFF


_REFLECT = bytes(int(f"{byte:08b}"[::-1], 2) for byte in range(256))


def cksum(data: bytes) -> int:
    """The 32-bit value ``cksum`` prints first for ``data`` (same as :func:`cksum_bitwise`)."""
    length = len(data)
    suffix = length.to_bytes((length.bit_length() + 7) // 8, "little")
    # zlib starts its register at ``value ^ 0xFFFFFFFF`` and returns it complemented:
    # 0xFFFFFFFF in and a complement out give POSIX's zero start and the raw register.
    register = zlib.crc32(data.translate(_REFLECT), 0xFFFFFFFF)
    register = zlib.crc32(suffix.translate(_REFLECT), register) ^ 0xFFFFFFFF
    crc = int.from_bytes(register.to_bytes(4, "little").translate(_REFLECT), "big")
    return ~crc & 0xFFFFFFFF
