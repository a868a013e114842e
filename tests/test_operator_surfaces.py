"""The operator tools over HTTP and the command line: the triage ledger, dead letters
filtered, paged, downloaded as ingest lines and replayed, who resolved what, the 400
for a key-identity inbox sent no key, and the access log. One served app per module."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from click.testing import CliRunner

import oncebox
from conftest import INBOXES, SESSION
from httpserver import serving
from oncebox import Delivery, InboxSpec, ManualClock, Oncebox
from oncebox.formats.ussd_h1 import make_frame
from oncebox.surfaces.cli import cli
from oncebox.surfaces.http import create_app
from oncebox.surfaces.http.accesslog import AccessLog
from test_http import is_problem

BOXES = (*INBOXES, InboxSpec("hooks", codec="keyed"))
START = 1_800_000_000.0  # 2027-01-15T08:00:00Z


CONFIG = """
[inboxes.ussd]
codec = "ussd-h1"
apply = "triage"
[inboxes.listing]
codec = "json-event"
apply = "generation"
[inboxes.feed]
codec = "feed"
[inboxes.hooks]
codec = "keyed"
"""


@dataclass
class Api:
    box: Oncebox
    url: str
    db: str
    tokens: dict[str, str]
    config: str

    def cli(self, *args: str) -> Any:
        """The command line on the same store and inboxes, in this process."""
        result = CliRunner().invoke(cli, ["--db", self.db, "--config", self.config, *args])
        assert result.exit_code == 0, result.output
        return result

    def client(self, token: str = "ops") -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.tokens[token]}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    where = tmp_path_factory.mktemp("ops")
    db = f"sqlite:///{where / 'ops.db'}"
    (where / "oncebox.toml").write_text(CONFIG)
    clock = ManualClock(START)
    box = oncebox.open(db, inboxes=BOXES, clock=clock)
    session = [Delivery(text.encode(), key=key) for key, text in SESSION]
    box.ingest_batch("ussd", session)
    box.ingest_batch("ussd", session)
    box.ingest_batch(
        "ussd", [Delivery(f"H1|{i}|K9|MED|{i}|5|#00".encode(), key=f"b-{i}") for i in range(5)]
    )
    clock.advance(3600)
    box.ingest("ussd", Delivery(b"junk", key="j-1", device_time="t0", snapshot_id="S1"))
    box.ingest("hooks", Delivery(b"x" * 70_000))  # no key, kept only in part
    tokens = {
        "ops": box.create_token("desk-ben", ["*"], ["operator", "write"]).secret,
        "reader": box.create_token("reader", ["*"], ["read"]).secret,
        "writer": box.create_token("writer", ["*"], ["write"]).secret,
    }
    try:
        with serving(AccessLog(create_app(box), "json")) as url:
            yield Api(box, url, db, tokens, str(where / "oncebox.toml"))
    finally:
        box.close()


# -- triage -----------------------------------------------------------------------------------
def test_the_triage_ledger_over_http_and_as_csv_on_the_command_line(api: Api) -> None:
    with api.client("reader") as http:
        ledger = http.get("/v1/inboxes/ussd/triage").json()
        not_triage = http.get("/v1/inboxes/listing/triage")
    assert (ledger["headcount"], ledger["every_arrival_headcount"]) == (23, 46)
    assert ledger["suppressed_headcount"] == 23 and ledger["inbox"] == "ussd"
    assert {"site": "Kakuma1", "need": "MED", "headcount": 3, "cases": 1,
            "every_arrival_headcount": 6, "arrivals": 2} in ledger["totals"]  # fmt: skip
    assert ledger["ranking"][0]["pri"] == 86
    assert "no triage ledger" in is_problem(not_triage, 409)["detail"]
    out = api.cli("triage", "ussd", "--format", "csv")
    assert out.output.splitlines()[1] == "Kakuma1,MED,3,1,6,2,3"
    ranked = api.cli("triage", "ussd", "--format", "csv", "--table", "ranking")
    assert ranked.output.splitlines()[1].startswith("1,86,Kakuma1,MED,3,")


# -- dead letters -----------------------------------------------------------------------------
def test_dead_letters_are_filtered_and_paged_over_http(api: Api) -> None:
    url = "/v1/inboxes/ussd/dead-letters"
    with api.client("reader") as http:
        checksums = http.get(url, params={"reason": "bad_checksum"}).json()
        later = http.get(url, params={"since": "2027-01-15T08:30:00"}).json()
        earlier = http.get(url, params={"until": "2027-01-15T08:30:00Z"}).json()
        found = http.get(url, params={"search": "junk"}).json()
        first = http.get(url, params={"limit": 2}).json()
        rest = http.get(url, params={"limit": 10, "after": first[-1]["id"]}).json()
        bad = http.get(url, params={"since": "yesterday"})
    assert [d["key"] for d in checksums] == [f"b-{i}" for i in range(5)]
    assert [d["key"] for d in later] == ["j-1"] and len(earlier) == 5
    assert [d["head"] for d in found] == [{"text": "junk"}]
    assert [d["key"] for d in first + rest] == [*(f"b-{i}" for i in range(5)), "j-1"]
    is_problem(bad, 422)


def test_the_published_schema_says_what_the_operator_routes_take(api: Api) -> None:
    """What /openapi.json declares is what the service takes: unix seconds as a time
    filter (documented, so they must be in the schema), and no number with a fraction
    where an integer is declared (schemathesis found both, ST201)."""
    with api.client() as http:
        doc = http.get("/openapi.json").json()
        by_seconds = http.get("/v1/inboxes/ussd/dead-letters", params={"until": "1800001800.0"})
        letter = http.get("/v1/inboxes/ussd/dead-letters", params={"reason": "bad_format"})
        url = f"/v1/dead-letters/{letter.json()[0]['id']}/replay"
        fraction = http.post(url, json={"lease_token": 26059.0})
        ttl_text = http.post("/v1/inboxes/ussd/leases", json={"scope": "S", "ttl": "60"})
    params = doc["paths"]["/v1/inboxes/{inbox}/dead-letters"]["get"]["parameters"]
    until = next(p for p in params if p["name"] == "until")["schema"]
    checker = jsonschema.FormatChecker()  # schemathesis checks formats too
    jsonschema.validate("1800001800.0", until, format_checker=checker)  # seconds admitted
    jsonschema.validate("2027-01-15T08:30:00Z", until, format_checker=checker)
    assert by_seconds.status_code == 200 and len(by_seconds.json()) == 5
    assert is_problem(fraction, 422)["status"] == 422  # an integer is declared
    assert is_problem(ttl_text, 422)["status"] == 422  # a number is declared, not text


@pytest.mark.parametrize(
    "when",
    ["1800001800", "1800001800.5", "2027-01-15", "2027-01-15T08:30", "2027-01-15T08:30:00Z",
     "2027-01-15t08:30:00.123456789z", "2027-01-15 08:30:00+01:00",  # accepted
     "-722", "88396260457715.84", "1e9", "yesterday", "2027-01-15Z", "2027-W03", "",
     "2027-02-30T00:00:00Z", "20270115T083000", "0000-00-00", "5712-79-03",
     "2027-01-15T24:00", "2027-01-15T08:30.5"],  # refused: no guessing
)  # fmt: skip
def test_a_time_filter_is_taken_exactly_when_the_schema_admits_it(api: Api, when: str) -> None:
    """The service and its published schema agree on every time filter (schemathesis
    found ``since=-722&until=88396260457715.84`` taken though the schema refused it)."""
    with api.client("reader") as http:
        doc = http.get("/openapi.json").json()
        answered = [
            http.get(f"/v1/inboxes/ussd/{route}", params={"since": when})
            for route in ("dead-letters", "dead-letters/lines")
        ]
    params = doc["paths"]["/v1/inboxes/{inbox}/dead-letters"]["get"]["parameters"]
    since = next(p for p in params if p["name"] == "since")["schema"]
    admitted = jsonschema.Draft202012Validator(since).is_valid(when)
    possible = when != "2027-02-30T00:00:00Z"  # matches the pattern; no such day
    assert [r.status_code for r in answered] == [200 if admitted and possible else 422] * 2


def test_downloaded_lines_fed_back_re_deliver_the_same_deliveries(api: Api, tmp_path: Path) -> None:
    with api.client("reader") as http:
        lines = http.get("/v1/inboxes/ussd/dead-letters/lines", params={"search": "junk"})
        kept_in_part = http.get("/v1/inboxes/hooks/dead-letters/lines")
    assert lines.headers["content-type"].startswith("application/x-ndjson")
    assert json.loads(lines.content) == {
        "frame": "junk",
        "frame_id": "j-1",
        "snapshot_id": "S1",
        "device_time": "t0",
        "dead_letter": api.box.dead_letters("ussd", search="junk")[0].id,
    }
    assert kept_in_part.content == b""  # no line can re-deliver a part
    with api.client("writer") as http:  # the batch route reads the same lines
        batch = http.post(
            "/v1/inboxes/ussd/batch",
            content=lines.content,
            headers={"Content-Type": "application/x-ndjson"},
        ).json()
    assert [d["reason"] for d in batch["decisions"]] == ["bad_format"]
    [again] = api.box.dead_letters("ussd", search="junk")  # the same dead letter, once more
    assert again.attempts == 1
    # The command line's download: the same lines, and it says what it left out.
    path = tmp_path / "hooks.ndjson"
    out = api.cli("dead-letters", "--inbox", "hooks", "--format", "ndjson")
    assert out.stdout == ""
    assert "left out 1 dead letter(s)" in out.stderr
    ndjson = api.cli(
        "dead-letters", "--inbox", "ussd", "--reason", "bad_checksum", "--format", "ndjson"
    )
    path.write_text(ndjson.stdout)
    fed = api.cli("ingest", "ussd", str(path))
    assert [json.loads(x)["reason"] for x in fed.stdout.splitlines()] == ["bad_checksum"] * 5


def test_a_dead_letter_is_replayed_with_the_tokens_name_and_a_note(api: Api) -> None:
    [letter] = api.box.dead_letters("ussd", search="junk", limit=1)
    url = f"/v1/dead-letters/{letter.id}/replay"
    with api.client("reader") as http:
        is_problem(http.post(url, json={}), 403)  # replaying needs the operator scope
    with api.client() as http:
        replayed = http.post(url, json={"note": "gateway fixed"}).json()
        [part] = http.get("/v1/inboxes/hooks/dead-letters").json()
        refused = http.post(f"/v1/dead-letters/{part['id']}/replay")
        missing = http.post("/v1/dead-letters/99999/replay")
    assert replayed["decision"]["reason"] == "bad_format"
    shown = replayed["dead_letter"]
    # Refused again: the same dead letter, one attempt more, still open.
    assert (shown["id"], shown["status"], shown["attempts"], shown["last_reason"]) == (
        letter.id, "open", letter.attempts + 1, "bad_format"
    )  # fmt: skip
    assert "kept only in part" in is_problem(refused, 409)["detail"]
    is_problem(missing, 404)
    state = json.loads([e for e in api.box.log_entries() if e.step == "replay"][-1].state)
    assert (state["actor"], state["note"], state["dead_letter"]) == (
        "desk-ben", "gateway fixed", letter.id
    )  # fmt: skip
    out = CliRunner().invoke(
        cli,
        ["--db", api.db, "--config", api.config, "dead-letters", "replay", str(letter.id)],
    )
    assert out.exit_code == 3  # refused again
    listed = api.cli(
        "dead-letters", "--inbox", "ussd", "--search", "junk", "--since", "2027-01-15T08:30Z"
    )
    assert json.loads(listed.output)[0]["attempts"] == letter.attempts + 2


# -- who resolved this --------------------------------------------------------------------------
def test_resolutions_and_retries_over_http_name_the_token(api: Api) -> None:
    api.box.ingest("ussd", Delivery(make_frame(2, "Kakuma2", "SHE", 9, 71).encode(), key="rec2"))
    [row] = api.box.quarantined("ussd")
    with api.client() as http:
        done = http.post(f"/v1/quarantine/{row.id}/resolve", json={"action": "keep", "note": "8"})
    assert done.json()["resolved_by"] == "desk-ben"
    [entry] = [e for e in api.box.log_entries() if e.step == "resolve"]
    assert json.loads(entry.state)["actor"] == "desk-ben"


# -- a key-identity inbox sent no key -----------------------------------------------------------
@pytest.mark.parametrize(("inbox", "body"), [("ussd", SESSION[0][1]), ("hooks", "payload")])
def test_a_key_identity_inbox_sent_no_key_is_400_and_stores_nothing(
    api: Api, inbox: str, body: str
) -> None:
    before = api.box.stats(inbox)
    with api.client("writer") as http:
        for headers in ({}, {"Oncebox-Key": ""}):
            refused = http.post(f"/v1/inboxes/{inbox}/deliveries", content=body, headers=headers)
            assert "Oncebox-Key" in is_problem(refused, 400)["detail"]
        unauthorized = httpx.post(f"{api.url}/v1/inboxes/{inbox}/deliveries", content=body)
    assert unauthorized.status_code == 401  # who asks is checked first
    assert api.box.stats(inbox) == before  # no record, no dead letter, no count


# -- the access log ---------------------------------------------------------------------------
def test_the_access_log_says_what_happened_and_never_a_token(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    frame = make_frame(9, "Kakuma1", "MED", 4, 50).encode()
    with caplog.at_level(logging.INFO, logger="oncebox.access"), api.client("writer") as http:
        http.post("/v1/inboxes/ussd/deliveries", content=frame, headers={"Oncebox-Key": "l-9"})
        http.post("/v1/inboxes/ussd/deliveries", content=frame, headers={"Oncebox-Key": "l-9"})
        http.get("/v1/inboxes/nope/triage")
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "oncebox.access"]
    assert [(x["status"], x["inbox"], x["verdict"]) for x in lines] == [
        (201, "ussd", "accepted"),
        (200, "ussd", "duplicate"),
        (403, "nope", None),  # a write token may not read
    ]
    assert all(x["method"] in ("POST", "GET") and x["latency_ms"] > 0 for x in lines)
    assert lines[0]["path"] == "/v1/inboxes/ussd/deliveries"
    assert api.tokens["writer"] not in caplog.text


def test_the_combined_format(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    app = AccessLog(create_app(api.box), "combined")
    with caplog.at_level(logging.INFO, logger="oncebox.access"), serving(app) as url:
        httpx.get(f"{url}/healthz?probe=1", headers={"User-Agent": 'agent "x"'})
    [line] = [r.getMessage() for r in caplog.records if r.name == "oncebox.access"]
    assert line.startswith("127.0.0.1 - - [")
    assert line.endswith('"GET /healthz?probe=1 HTTP/1.1" 200 15 "-" "agent \\x22x\\x22"')
