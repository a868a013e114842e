"""Dead letters and conflicts at volume through a real ``oncebox serve`` and the CLI as a
subprocess (issue 23): previews then bulk actions, a replay refused again exiting 3, a
corrected replay, archive, an export's lines fed back closing their dead letters, and
unknown values refused naming the known ones. SQLite file and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

import oncebox
from clirun import oncebox_in
from oncebox.formats.ussd_h1 import make_frame
from serveproc import Served, serving

pytestmark = pytest.mark.slow  # a real service and the command line, as processes

LETTERS = "/v1/inboxes/ussd/dead-letters"


@pytest.fixture
def served(shared_url: str) -> Iterator[tuple[Served, str, str]]:
    box = oncebox.open(shared_url)
    try:
        ops = box.create_token("desk-ana", ["*"], ["write", "operator"]).secret
        reader = box.create_token("reader", ["*"], ["read"]).secret
    finally:
        box.close()
    with serving(shared_url) as server:
        yield server, ops, reader


def client(server: Served, secret: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"}
    return httpx.Client(base_url=server.base, headers=headers, timeout=30)


def frame(http: httpx.Client, key: str, body: str) -> dict[str, object]:
    answer = http.post(
        "/v1/inboxes/ussd/deliveries", content=body.encode(), headers={"Oncebox-Key": key}
    )
    return dict(answer.json())


def run(url: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``oncebox`` on the store: a test's first command a process, the rest in this one."""
    return oncebox_in(Path.cwd(), "--db", url)(*args, stdin=stdin or b"", text=False)


def test_bulk_replay_and_archive_over_http_previewed_then_logged_once(
    served: tuple[Served, str, str], shared_url: str
) -> None:
    server, ops, reader = served
    with client(server, ops) as http:
        for i in range(4):
            frame(http, f"c{i}-{i}", f"H1|{i}|K1|MED|3|86|#00")  # bad_checksum
        frame(http, "j-1", "junk")  # bad_format
        unknown = http.get(f"{LETTERS}/preview", params={"reason": "bad_chksum"})
        assert unknown.status_code == 400
        assert "did you mean bad_checksum" in unknown.json()["detail"]
        assert "bad_format" in unknown.json()["known"]
        assert http.get(LETTERS, params={"status": "closed"}).status_code == 400
        query = {"reason": "bad_checksum", "status": "open"}
        preview = http.get(f"{LETTERS}/preview", params=query).json()
        assert preview["count"] == 4 and len(preview["first"]) == 4
        ran = http.post(f"{LETTERS}/replay", params=query, json={"limit": 3}).json()
        assert ran["count"] == 3 and ran["next_after"] == preview["first"][2]["id"]
        assert {i["outcome"] for i in ran["items"]} == {"rejected:bad_checksum"}
        # Refused again: the same dead letters, one attempt each, still open.
        listed = http.get(LETTERS, params=query).json()
        assert [d["attempts"] for d in listed] == [1, 1, 1, 0]
        with client(server, reader) as read_only:
            refused = read_only.post(f"{LETTERS}/archive", params=query, json={"note": "x"})
            assert refused.status_code == 403
        archived = http.post(f"{LETTERS}/archive", params=query, json={"note": "old gateway"})
        assert archived.json()["count"] == 4
        assert http.get(f"{LETTERS}/preview", params=query).json()["count"] == 0
        metrics = http.get("/metrics").text
        # Replays refused again counted no rejection more, and made no dead letter more.
        assert 'oncebox_rejected_total{inbox="ussd",reason="bad_checksum"} 4.0' in metrics
        assert (
            'oncebox_dead_letters_by_reason{inbox="ussd",reason="bad_checksum",'
            'status="archived"} 4.0'
        ) in metrics
        # One at a time: a corrected replay closes the junk one.
        [junk] = http.get(LETTERS, params={"status": "open"}).json()
        url = f"/v1/dead-letters/{junk['id']}/replay"
        body = {"body": make_frame(1, "K1", "MED", 3, 86), "key": "j-1"}
        assert http.post(url, json=body).status_code == 409  # a correction needs a note
        fixed = http.post(url, json={**body, "note": "re-keyed by hand"}).json()
        assert fixed["decision"]["verdict"] == "accepted"
        assert fixed["dead_letter"]["status"] == "replayed"
        again = http.post(f"/v1/dead-letters/{junk['id']}/archive", json={"note": "done"})
        assert again.json()["status"] == "archived"
    box = oncebox.open(shared_url)
    try:
        bulk = [json.loads(e.state) for e in box.log_entries() if e.step == "bulk"]
    finally:
        box.close()
    assert [(b["action"], b["count"], b["actor"]) for b in bulk] == [
        ("replay", 3, "desk-ana"), ("archive", 4, "desk-ana")
    ]  # fmt: skip
    assert bulk[1]["filter"]["reason"] == "bad_checksum"


def test_the_cli_previews_then_acts_and_exits_3_when_refused_again(
    served: tuple[Served, str, str], shared_url: str
) -> None:
    server, ops, _ = served
    with client(server, ops) as http:
        ids = [
            frame(http, f"a{i}-{i}", f"H1|{i}|K1|MED|3|86|#00")["dead_letter_id"] for i in range(3)
        ]
        for i in range(2):  # two conflicts under rec*, one elsewhere
            frame(http, f"rec{i}-{i}", make_frame(i, "K1", "MED", 3, 86))
            frame(http, f"rec{i}-{i}", make_frame(i, "K1", "MED", 9, 86))
    refused = run(shared_url, "dead-letters", "replay", str(ids[0]))
    assert refused.returncode == 3 and b"refused again: bad_checksum" in refused.stderr
    assert json.loads(refused.stdout)["dead_letter"]["attempts"] == 1
    typo = run(shared_url, "dead-letters", "--inbox", "ussd", "--reason", "bad_chksum")
    assert typo.returncode == 2 and b"did you mean bad_checksum" in typo.stderr
    args = ["dead-letters", "bulk", "archive", "--inbox", "ussd", "--reason", "bad_checksum"]
    preview = run(shared_url, *args, "--note", "drill")
    assert preview.returncode == 0 and json.loads(preview.stdout)["count"] == 3
    assert b"nothing done" in preview.stderr
    assert [d["status"] for d in json.loads(run(shared_url, "dead-letters").stdout)] == ["open"] * 3
    done = run(shared_url, *args, "--note", "drill", "--yes", "--actor", "cli:ana")
    assert done.returncode == 0 and json.loads(done.stdout)["count"] == 3
    resolve = ["quarantine", "bulk-resolve", "ussd", "keep", "--identity-prefix", "rec"]
    shown = run(shared_url, *resolve, "--note", "first counts stand")
    assert json.loads(shown.stdout)["count"] == 2
    kept = run(shared_url, *resolve, "--note", "first counts stand", "--yes")
    assert kept.returncode == 0, kept.stderr
    assert {i["outcome"] for i in json.loads(kept.stdout)["items"]} == {"kept"}


def test_an_exports_lines_fed_back_close_their_dead_letters(
    served: tuple[Served, str, str], shared_url: str
) -> None:
    server, ops, _ = served
    with client(server, ops) as http:
        for i in range(3):
            frame(http, f"e{i}-{i}", f"H1|{i}|K1|MED|3|86|#00")
        exported = http.get(f"{LETTERS}/lines").content
    lines = exported.decode().splitlines()
    fixed = []
    for i, line in enumerate(lines):
        envelope = json.loads(line)
        assert isinstance(envelope["dead_letter"], int)
        envelope["frame"] = make_frame(i, "K1", "MED", 3, 86)
        fixed.append(json.dumps(envelope))
    fed = run(shared_url, "ingest", "ussd", "-", stdin="\n".join(fixed).encode() + b"\n")
    assert fed.returncode == 0, fed.stderr
    listed = json.loads(run(shared_url, "dead-letters", "--inbox", "ussd").stdout)
    assert [d["status"] for d in listed] == ["replayed"] * 3
    [stats] = json.loads(run(shared_url, "stats", "ussd").stdout)
    assert stats["verdicts"] == {"accepted": 3, "rejected": 3}


def test_a_mistyped_query_parameter_is_400_not_a_filter_left_out(
    served: tuple[Served, str, str],
) -> None:
    server, _, reader = served
    with client(server, reader) as http:
        answer = http.get(LETTERS, params={"reasn": "bad_checksum"})
        assert answer.status_code == 400
        assert "did you mean reason?" in answer.json()["detail"]
        assert "status" in answer.json()["known"]
        typo = http.get("/v1/inboxes/ussd/quarantine/preview", params={"identity_prefx": "r"})
        assert "did you mean identity_prefix?" in typo.json()["detail"]
