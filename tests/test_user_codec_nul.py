"""A user codec's identity or stored fields holding a NUL character: PostgreSQL holds no
NUL in text, so such a delivery is refused as its own dead letter on every backend (as a
delivery's own key with a NUL is, engine/ingest.py), never stored on one backend and a
failure of the whole batch on the other."""

from __future__ import annotations

import oncebox
from oncebox import Decoded, Delivery, InboxSpec, ManualClock
from oncebox.formats.codec import IdentityMode


class _NulCodec:
    """Identity: the body's text, which may hold a NUL; stored fields written by the
    codec itself, with a NUL for a body starting with ``f``."""

    name = "nul-review"
    identity: IdentityMode = "key"
    max_bytes = 64

    def decode(self, delivery: Delivery) -> Decoded:
        text = delivery.body.decode()
        if text.startswith("f"):
            return Decoded(delivery.body, text, {"n": "a\x00b"}, '{"n":"a\x00b"}')
        return Decoded(delivery.body, text)


def test_a_nul_in_what_a_codec_gives_costs_only_its_delivery(
    store_url: str, clock: ManualClock
) -> None:
    inboxes = [InboxSpec("nul", codec=_NulCodec())]
    with oncebox.open(store_url, inboxes=inboxes, clock=clock) as box:
        batch = [Delivery(b"ok"), Delivery(b"a\x00b"), Delivery(b"fields")]
        decisions = box.ingest_batch("nul", batch)
        got = [(str(d.verdict), d.reason, d.may_ack) for d in decisions]
        assert got == [
            ("accepted", None, True),
            ("rejected", "bad_key", True),
            ("rejected", "codec_error", True),
        ]
        letters = sorted(bytes(letter.head) for letter in box.dead_letters("nul"))
        assert letters == [b"a\x00b", b"fields"]
        assert box.verify().ok
