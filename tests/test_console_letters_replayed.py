"""A dead letter replayed (corrected) already and replayed again from the console as it
was kept: refused again, it stays replayed, and the page's notice says that this replay
was refused, never the first replay's verdict as if it were this one's. Over HTTP, on
both backends."""

from __future__ import annotations

import re

from oncebox import Delivery, ManualClock
from oncebox.formats.ussd_h1 import make_frame
from test_console_access import Served, csrf_of
from test_console_access import served as served
from test_security_sessions import client, sign_in

BAD = b"H1|1|K1|MED|3|86|#00"  # a wrong trailer: bad_checksum


def test_a_replay_refused_again_after_a_corrected_one_is_said_as_refused(
    served: Served, clock: ManualClock
) -> None:
    box = served.box
    letter_id = box.ingest("ussd", Delivery(BAD, key="a-1")).dead_letter_id or 0
    good = make_frame(1, "K1", "MED", 3, 86).encode()
    box.replay(letter_id, "ops", note="trailer recomputed", body=good)
    clock.advance(60)
    secret = box.create_token("desk", ["*"], ["read", "operator"]).secret
    with client(served.url) as http:
        sign_in(http, secret)
        csrf = csrf_of(http, "/console/dead-letters")
        done = http.post(
            f"/console/dead-letters/{letter_id}/replay", data={"csrf": csrf, "note": "again"}
        )
        assert done.status_code == 303
        page = http.get(done.headers["location"]).text
    notice = re.search(r'<p class="notice ([a-z]+)"[^>]*>(.*?)</p>', page, re.S)
    assert notice is not None, page
    assert notice.group(1) == "bad" and "refused again: bad_checksum" in notice.group(2)
    [letter] = box.dead_letters("ussd")
    assert (letter.status, letter.replay_verdict, letter.attempts) == ("replayed", "accepted", 2)
