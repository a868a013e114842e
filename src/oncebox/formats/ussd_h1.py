"""``ussd-h1``: the field adapter's USSD frame ``H1|seq|site|need|headcount|pri|#xx``.

The trailer ``xx`` is POSIX ``cksum`` of the body (everything before ``|#``) modulo 256
in two hex digits. Format is checked first, then the trailer, and only then may dedup
state be consulted (docs/concepts.md#ingest-order, step 2), so a corrupted copy can
never poison a frame id.
Numbers have at most 9 digits, so every field fits any store's integers. The gateway
supplies the identity, ``frame_id`` (``rec_id-seq``); the witness is the
exact frame bytes.

The frame id is checked after the frame itself (docs/codecs.md#ussd-h1): none is ``missing_key``
(a gateway misconfigured, not bad content), one outside ``[A-Za-z0-9_.:-]{1,128}`` is
``bad_key``, and one whose ``-seq`` part is not the frame's own seq field, digit for
digit, is ``key_mismatch``: otherwise the same frame under two ids would count twice in
the ledger. A frame id without a ``-digits`` part (``rec1``) names no seq.
"""

from __future__ import annotations

import re

from oncebox.formats.cksum import cksum
from oncebox.formats.codec import Decoded, Delivery, IdentityMode
from oncebox.formats.invalid import Invalid

MAX_BYTES = 160
FRAME = re.compile(
    rb"H1\|(?P<seq>[0-9]{1,9})\|(?P<site>[A-Za-z0-9]{1,8})\|(?P<need>[A-Z]{3})"
    rb"\|(?P<headcount>[0-9]{1,9})\|(?P<pri>[0-9]{1,9})\|#(?P<trailer>[0-9a-fA-F]{2})"
)
FRAME_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
FRAME_ID_SEQ = re.compile(r"-([0-9]+)\Z")


def trailer(body: bytes) -> str:
    """The two lowercase hex digits the sender appends to ``body``."""
    return f"{cksum(body) % 256:02x}"


def make_frame(seq: int, site: str, need: str, headcount: int, pri: int) -> str:
    body = f"H1|{seq}|{site}|{need}|{headcount}|{pri}"
    return f"{body}|#{trailer(body.encode())}"


class UssdH1Codec:
    name = "ussd-h1"
    identity: IdentityMode = "key"
    max_bytes = MAX_BYTES
    needs_key = True  # the gateway's frame_id

    def decode(self, delivery: Delivery) -> Decoded:
        frame = delivery.body
        if len(frame) > MAX_BYTES:
            raise Invalid("too_large", f"{len(frame)} bytes exceeds {MAX_BYTES}")
        match = FRAME.fullmatch(frame)
        if match is None:
            raise Invalid("bad_format", "not an H1|seq|site|need|headcount|pri|#xx frame")
        seq, site, need, headcount, pri, mark = match.groups()
        body = frame[:-4]  # everything before the "|#xx" the pattern ended with
        if int(mark, 16) != cksum(body) % 256:
            raise Invalid(
                "bad_checksum", f"trailer #{mark.decode()} but cksum gives #{trailer(body)}"
            )
        _check_frame_id(delivery.key, seq.decode())
        fields = {
            "seq": int(seq),
            "site": site.decode(),
            "need": need.decode(),
            "headcount": int(headcount),
            "pri": int(pri),
        }
        return Decoded(content=frame, key=delivery.key, fields=fields)


def _check_frame_id(frame_id: str | None, seq: str) -> None:
    if not frame_id:
        raise Invalid("missing_key", "the gateway must supply the frame_id (rec_id-seq)")
    if not FRAME_ID.fullmatch(frame_id):
        raise Invalid("bad_key", "a frame_id is 1 to 128 of A-Z a-z 0-9 _ . : -")
    named = FRAME_ID_SEQ.search(frame_id)
    if named is not None and named.group(1) != seq:
        raise Invalid(
            "key_mismatch", f"frame_id {frame_id} names seq {named.group(1)}, the frame seq {seq}"
        )
