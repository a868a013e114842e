"""Tokens with expiry and last use through the command line (a subprocess) and a real
``oncebox serve``, on a SQLite file and PostgreSQL (issue 23, item 5): made with
``--expires``, listed with ISO 8601 times, refused with the reason once expired, their
last use kept once for a burst of requests; a read token's console session is
read-only."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

import oncebox
from clirun import oncebox_in
from oncebox import ManualClock
from serveproc import serving

pytestmark = pytest.mark.slow  # a real service and the command line, as processes

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def run(url: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[bytes]:
    done = oncebox_in(Path.cwd(), "--db", url)(*args, text=False)  # the first a process
    assert (done.returncode == 0) is ok, done.stderr.decode()
    return done


def test_expiry_and_last_use_from_the_cli_through_the_service(shared_url: str) -> None:
    made = json.loads(run(shared_url, "token", "create", "poller", "--inbox", "*",
                          "--scope", "read", "--expires", "30d").stdout)  # fmt: skip
    assert ISO.fullmatch(made["created_at"]) and ISO.fullmatch(made["expires_at"])
    assert made["last_used_at"] is None
    refused = run(shared_url, "token", "create", "x", "--inbox", "*", "--expires", "soon",
                  ok=False)  # fmt: skip
    assert "expiry 'soon'" in refused.stderr.decode() and "Traceback" not in refused.stderr.decode()
    # A token whose expiry has passed: made on a clock an hour back, for half an hour.
    with oncebox.open(shared_url, clock=ManualClock(time.time() - 3600)) as box:
        old = box.create_token("old", ["*"], ["read"], expires="30m").secret
    with serving(shared_url) as server, httpx.Client(base_url=server.base, timeout=30) as http:
        for _ in range(20):
            answer = http.get(
                "/v1/log/checkpoint", headers={"Authorization": f"Bearer {made['secret']}"}
            )
            assert answer.status_code == 200
        expired = http.get("/v1/log/checkpoint", headers={"Authorization": f"Bearer {old}"})
        assert expired.status_code == 401
        assert re.fullmatch(r"token 'old' expired at \S+Z", expired.json()["detail"])
        listed = {t["name"]: t for t in json.loads(run(shared_url, "token", "list").stdout)}
    assert ISO.fullmatch(listed["poller"]["last_used_at"])  # kept, to the minute
    assert listed["old"]["last_used_at"] is None  # a refused token was not used
    with oncebox.open(shared_url) as box:
        entries = [e.step for e in box.log_entries()]
    assert entries.count("token") == 2  # creations are logged; uses are not


def test_a_read_token_signs_in_to_a_read_only_console(shared_url: str) -> None:
    with oncebox.open(shared_url) as box:
        reader = box.create_token("auditor", ["*"], ["read"]).secret
    with serving(shared_url) as server, httpx.Client(base_url=server.base, timeout=30) as http:
        form = http.get("/console/signin")
        nonce = re.search(r'name="signin" value="([^"]+)"', form.text)
        assert nonce
        signed = http.post("/console/signin", data={"signin": nonce[1], "token": reader})
        assert signed.status_code == 303
        page = http.get("/console/dead-letters")
        assert "read-only" in page.text and page.text.count('method="post"') == 1  # sign-out
        csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
        assert csrf
        verify = http.post("/console/log/verify", data={"csrf": csrf[1]})
        assert verify.status_code == 403
