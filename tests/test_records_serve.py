"""Records you can find (issue 21) through a real ``oncebox serve`` and the CLI as a
subprocess, on SQLite and PostgreSQL: did a delivery arrive, and what was decided."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import oncebox
from clirun import oncebox_in
from helpers import event_body
from oncebox.formats.ussd_h1 import make_frame
from serveproc import Served, serving

pytestmark = pytest.mark.slow  # a server process each

DELIVER = "/v1/inboxes/ussd/deliveries"


def h1(seq: int, headcount: int = 3) -> bytes:
    return make_frame(seq, "Kakuma1", "MED", headcount, 86).encode()


@pytest.fixture
def served(shared_url: str) -> Iterator[tuple[Served, str, str]]:
    box = oncebox.open(shared_url)
    try:
        writer = box.create_token("writer", ["*"], ["write", "read", "operator"]).secret
        reader = box.create_token("ussd-reader", ["ussd"], ["read"]).secret
    finally:
        box.close()
    with serving(shared_url) as server:
        yield server, writer, reader


def client(server: Served, secret: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"}
    return httpx.Client(base_url=server.base, headers=headers, timeout=30)


def cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``oncebox`` on the store: a test's first command a process, the rest in this one."""
    env = {**os.environ, "ONCEBOX_DB": url}
    return oncebox_in(Path.cwd(), env=env)(*args)


def deliver(http: httpx.Client) -> dict[str, int]:
    """Six frames under gateway keys; gw-1 again, contradicted (then resolved) and
    refused; an event under an upload key that is not its identity."""
    for seq in range(1, 7):
        made = http.post(DELIVER, content=h1(seq), headers={"Oncebox-Key": f"gw-{seq}"})
        assert made.status_code == 201, made.text
    assert http.post(DELIVER, content=h1(1), headers={"Oncebox-Key": "gw-1"}).status_code == 200
    clash = http.post(DELIVER, content=h1(1, 9), headers={"Oncebox-Key": "gw-1"}).json()
    assert clash["verdict"] == "conflict"
    bad = http.post(DELIVER, content=b"H1|1|Kakuma1|MED|3|86|#00", headers={"Oncebox-Key": "gw-1"})
    assert bad.json()["reason"] == "bad_checksum"
    resolved = http.post(
        f"/v1/quarantine/{clash['quarantine_id']}/resolve",
        json={"action": "accept", "note": "the gateway re-read 9"},
    )
    assert resolved.status_code == 200, resolved.text
    listed = http.post(
        "/v1/inboxes/listing/deliveries",
        content=event_body("n-1"),
        headers={"Content-Type": "application/json", "Oncebox-Key": "upload-7"},
    )
    assert listed.status_code == 201, listed.text
    return {"record": int(clash["record_id"]), "listing": int(listed.json()["record_id"])}


def test_did_it_arrive_and_what_was_decided_over_http_and_the_cli(
    served: tuple[Served, str, str], shared_url: str
) -> None:
    server, writer, reader = served
    with client(server, writer) as http:
        made = deliver(http)
    with client(server, reader) as http:
        rows = http.get("/v1/inboxes/ussd/records").json()
        assert [r["key"] for r in rows] == [f"gw-{n}" for n in range(6, 0, -1)]
        first = rows[-1]
        assert first["duplicates"] == 1 and first["revision"] == 2 and first["inbox"] == "ussd"
        assert first["content_length"] == len(h1(1, 9)) and first["cut"] == []
        # A page at a time, in either order, nothing missed nor repeated.
        ids, after = [], 0
        paged = {"order": "oldest", "limit": 4}
        while page := http.get("/v1/inboxes/ussd/records", params={**paged, "after": after}).json():
            ids += [r["id"] for r in page]
            after = page[-1]["id"]
        assert ids == sorted(r["id"] for r in rows)
        found = http.get("/v1/inboxes/ussd/records", params={"search": "H1|3|"}).json()
        assert [r["key"] for r in found] == ["gw-3"]
        keyed = http.get("/v1/inboxes/ussd/records", params={"key": "gw-1"}).json()
        assert [r["id"] for r in keyed] == [made["record"]]

        looked = http.get("/v1/inboxes/ussd/lookup", params={"key": "gw-1"}).json()
        assert looked["arrived"] is True and looked["more"] is False
        whats = [step["what"] for step in looked["timeline"]]
        assert sorted(whats) == ["accepted", "conflict", "duplicates", "rejected", "resolved"]
        assert [s["by"] for s in looked["timeline"] if s["what"] == "resolved"] == ["writer"]
        none = http.get("/v1/inboxes/ussd/lookup", params={"key": "gw-404"}).json()
        assert none["arrived"] is False and none["timeline"] == []

        whole = http.get(f"/v1/records/{made['record']}").json()
        assert whole["inbox"] == "ussd" and [r["revision"] for r in whole["revisions"]] == [1]
        assert [e["step"] for e in whole["log"]] == ["accept", "quarantine", "resolve"]
        assert whole["proof"] == f"/v1/log/proofs/records/{made['record']}"
        assert http.get(whole["proof"]).status_code == 200
        # Another inbox's record is not this token's to see; bad queries say why.
        assert http.get(f"/v1/records/{made['listing']}").status_code == 404
        assert http.get("/v1/inboxes/listing/records").status_code == 403
        for params in ({"since": "yesterday"}, {"search": "s" * 257}, {"order": "sideways"},
                       {"after": made["listing"]}, {"key": "a\x00b"}):  # fmt: skip
            answer = http.get("/v1/inboxes/ussd/records", params=params)
            assert answer.status_code == 422, (params, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")
    with client(server, writer) as http:
        upload = http.get("/v1/inboxes/listing/lookup", params={"key": "upload-7"}).json()
        assert [r["id"] for r in upload["records"]] == [made["listing"]]
        assert http.get("/v1/inboxes/nope/records").status_code == 404

    # The same from the command line, on the same store.
    listed = cli(shared_url, "records", "ussd", "--key", "gw-1")
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [made["record"]]
    oldest = cli(shared_url, "records", "ussd", "--order", "oldest", "--limit", "2")
    assert [r["key"] for r in json.loads(oldest.stdout)] == ["gw-1", "gw-2"]
    shown = cli(shared_url, "record", str(made["record"]))
    assert shown.returncode == 0 and json.loads(shown.stdout)["record"]["revision"] == 2
    looked_up = cli(shared_url, "lookup", "ussd", "gw-1")
    assert looked_up.returncode == 0 and json.loads(looked_up.stdout)["arrived"] is True
    for args, said in (
        (("record", "999999"), "no record 999999"),
        (("records", "ussd", "--search", "s" * 257), "--search"),
        (("records", "nope"), "no inbox named 'nope'"),
        (("records", "ussd", "--after", str(made["listing"])), "holds no record"),
    ):
        refused = cli(shared_url, *args)
        assert refused.returncode == 2 and said in refused.stderr, (args, refused.stderr)
