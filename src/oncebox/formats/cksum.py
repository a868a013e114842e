"""POSIX ``cksum``: the CRC the USSD field adapter puts in every H1 trailer.

This is not CRC-32 as zlib computes it: POSIX feeds the bytes most-significant-bit
first through polynomial 0x04C11DB7 from a zero register, then the message length
(least significant byte first, no trailing zeros), and complements the result. It must
agree with the ``cksum`` utility byte for byte.
"""

from __future__ import annotations

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


def cksum(data: bytes) -> int:
    """The 32-bit value ``cksum`` prints first for ``data``."""
    crc = _feed(0, data)
    length = len(data)
    suffix = bytearray()
    while length:
        suffix.append(length & 0xFF)
        length >>= 8
    return ~_feed(crc, suffix) & 0xFFFFFFFF
