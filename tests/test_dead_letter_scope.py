"""Correcting a dead letter is an operator's replay: a batch line naming one
(``"dead_letter": ID``, as a dead letters' export writes them) with other bytes than it
kept closes it only for a token with the operator scope. From a sender's write token
such a line is decided as any delivery, so the sender cannot put a dead letter out of
the operators' sight by sending other bytes in its name; the export's own line (what the
dead letter kept) still counts on it. Both backends."""

from __future__ import annotations

import json

import httpx

from oncebox import Delivery
from oncebox.formats.ussd_h1 import make_frame
from test_console_access import Served
from test_console_access import served as served

BAD = b"H1|1|K1|MED|3|86|#00"  # a wrong trailer: bad_checksum
BATCH = "/v1/inboxes/ussd/batch"


def _line(letter_id: int, frame_id: str, seq: int) -> bytes:
    frame = make_frame(seq, "K1", "MED", 7, 86)
    return json.dumps({"frame_id": frame_id, "frame": frame, "dead_letter": letter_id}).encode()


def _post(served: Served, secret: str, line: bytes) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/x-ndjson"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as http:
        answer = http.post(BATCH, content=line + b"\n")
    assert answer.status_code == 200, answer.text
    [decision] = answer.json()["decisions"]
    return dict(decision)


def test_a_write_token_cannot_close_a_dead_letter_with_other_bytes(served: Served) -> None:
    box = served.box
    letter_id = box.ingest("ussd", Delivery(BAD, key="a-1")).dead_letter_id or 0
    sender = box.create_token("gateway", ["ussd"], ["write"]).secret
    decision = _post(served, sender, _line(letter_id, "other-9", 9))
    assert decision["verdict"] == "accepted"  # decided as any delivery
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.attempts, letter.replayed_at) == ("open", 0, None)
    assert [e.step for e in box.log_entries()].count("replay") == 0
    # The export's own line, what it kept, from the same token: refused again, on it.
    kept = {"frame_id": "a-1", "frame": BAD.decode(), "dead_letter": letter_id}
    assert _post(served, sender, json.dumps(kept).encode())["reason"] == "bad_checksum"
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.attempts) == ("open", 1)
    # An operator's token feeding the export's line back closes it, as documented.
    operator = box.create_token("desk", ["ussd"], ["write", "operator"]).secret
    _post(served, operator, _line(letter_id, "a-1", 1))
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.replay_verdict) == ("replayed", "accepted")
