"""Issue 21, Prove, end to end: a segment fetched from a real ``oncebox serve`` (and made by
``oncebox segment``) is checked by ``oncebox verify-feed`` with nothing but the segment,
the checkpoint and the public key; every forgery of it exits 2 naming its reason."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import oncebox
from clirun import oncebox_here, oncebox_in
from conftest import INBOXES
from oncebox import Delivery
from oncebox.engine.checkpoint import Checkpoint, generate_key, sign_checkpoint
from oncebox.formats.ussd_h1 import make_frame
from serveproc import get, serving

pytestmark = pytest.mark.slow  # a real service and the command line, as processes
Doc = dict[str, Any]


def oncebox_cli(cwd: Path, *args: str, db: str | None = None) -> subprocess.CompletedProcess[str]:
    """A test's first command a process, the rest in this one (tests/clirun.py)."""
    where = ["--db", db] if db else []
    return oncebox_in(cwd, *where)(*args)


def fill(url: str) -> tuple[str, str]:
    """Records of ussd between feed's; a read token for ussd alone and one for every inbox."""
    box = oncebox.open(url, inboxes=INBOXES)
    try:
        for n in range(1, 6):
            box.ingest(
                "ussd", Delivery(make_frame(n, "Kakuma1", "MED", n, 86).encode(), key=f"r{n}-{n}")
            )
            token = box.lease("feed", f"S{n}", 600).token
            box.ingest(
                "feed", Delivery(f"row {n}".encode(), snapshot_id=f"S{n}", lease_token=token)
            )
        conflict = box.ingest(
            "ussd", Delivery(make_frame(1, "Kakuma1", "MED", 9, 86).encode(), key="r1-1")
        )
        assert conflict.quarantine_id is not None
        box.resolve(conflict.quarantine_id, "accept", "corrected at the kiosk")
        ussd = box.create_token("ussd-reader", ["ussd"], ["read"]).secret
        every = box.create_token("auditor", ["*"], ["read"]).secret
    finally:
        box.close()
    return ussd, every


def fetched(base: str, path: str, secret: str) -> Any:
    status, _, body = get(base + path, secret)
    assert status == 200, body
    return json.loads(body)


def position(doc: Doc, step: str, inbox: str, nth: int = 0) -> int:
    found = [
        i
        for i, e in enumerate(doc["entries"])
        if e.get("step") == step and json.loads(e["state"])["inbox"] == inbox
    ]
    return found[nth]


def drop(doc: Doc) -> None:
    doc["entries"].pop(position(doc, "accept", "ussd", 1))


def swap(doc: Doc) -> None:
    i, j = position(doc, "accept", "ussd", 1), position(doc, "accept", "ussd", 2)
    doc["entries"][i], doc["entries"][j] = doc["entries"][j], doc["entries"][i]


def alter_content(doc: Doc) -> None:
    doc["entries"][position(doc, "accept", "ussd", 1)]["content"] = {"text": "H1|2|forged"}


def alter_state(doc: Doc) -> None:
    entry = doc["entries"][position(doc, "resolve", "ussd")]
    entry["state"] = entry["state"].replace("corrected", "invented")


FORGERIES: list[tuple[Callable[[Doc], None], str]] = [
    (drop, "withheld"),
    (swap, "reordered"),
    (alter_content, "altered"),
    (alter_state, "altered"),
]


def test_a_served_segment_verifies_offline_and_every_forgery_exits_2(
    shared_url: str, tmp_path: Path
) -> None:
    ussd, every = fill(shared_url)
    key = tmp_path / "audit.key"
    assert oncebox_cli(tmp_path, "keygen", str(key)).returncode == 0
    with serving(shared_url, "--sign", str(key)) as served:
        cp = fetched(served.base, "/v1/log/checkpoint", ussd)
        size = cp["tree_size"]
        asked = f"from=2&to={size}&tree_size={size}"
        doc = fetched(served.base, f"/v1/inboxes/ussd/feed/segment?{asked}", ussd)
        feed = fetched(served.base, f"/v1/inboxes/feed/feed/segment?{asked}", every)
        whole = fetched(served.base, f"/v1/inboxes/ussd/feed/segment?{asked}&whole=true", every)

        # What the service refuses, and how.
        def status(path: str, secret: str = ussd) -> int:
            return get(served.base + path, secret)[0]

        assert status(f"/v1/inboxes/ussd/feed/segment?{asked}&whole=true") == 403
        assert status(f"/v1/inboxes/feed/feed/segment?{asked}") == 403
        assert status(f"/v1/inboxes/nope/feed/segment?{asked}", every) == 404
        assert status("/v1/inboxes/ussd/feed/segment?from=3&to=2") == 409
        assert status(f"/v1/inboxes/ussd/feed/segment?from=1&to={size + 1}") == 409
        assert status("/v1/inboxes/ussd/feed/segment?from=1&to=1001") == 409
        assert status("/v1/inboxes/ussd/feed/segment?to=2") == 422
        assert status("/v1/inboxes/ussd/feed/segment?from=0&to=2") == 422
        assert status("/v1/inboxes/ussd/feed/segment?from=1&to=2", "") == 401

    # The same segment from the store itself, by the command line.
    local = oncebox_cli(
        tmp_path, "segment", "ussd", "--from", "2", "--to", str(size), db=shared_url
    )
    assert local.returncode == 0, local.stderr
    assert json.loads(local.stdout) == doc

    # Offline from here on: the segment, the checkpoint and the public key.
    (tmp_path / "cp.json").write_text(json.dumps(cp))
    checked = ["--from", "2", "--to", str(size), "--checkpoint", "cp.json"]
    trusted = [*checked, "--public-key", f"{key}.pub"]

    def verify(document: Doc, *options: str) -> subprocess.CompletedProcess[str]:
        """In this process: the forgeries are many and offline (the first is a process)."""
        (tmp_path / "segment.json").write_text(json.dumps(document))
        return oncebox_here(tmp_path, "verify-feed", *options, "segment.json")

    (tmp_path / "segment.json").write_text(json.dumps(doc))
    result = oncebox_cli(tmp_path, "verify-feed", *trusted, "--inbox", "ussd", "segment.json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] and report["trusted"] and (report["from"], report["to"]) == (2, size)
    assert [r["step"] for r in report["records"]] == ["accept"] * 4 + ["resolve"]
    assert report["records"][-1]["content"] == {"text": make_frame(1, "Kakuma1", "MED", 9, 86)}
    assert json.loads(verify(whole, *trusted, "--whole").stdout)["hidden"] == 0
    assert verify(feed, *trusted).returncode == 0

    for forge, why in FORGERIES:
        forgery = copy.deepcopy(doc)
        forge(forgery)
        refused = verify(forgery, *trusted)
        assert refused.returncode == 2, (forge.__name__, refused.stdout)
        assert refused.stderr.startswith(f"oncebox: error: {why}: "), refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1

    # An entry of feed's passed off as ussd's: feed's record, whole, in ussd's segment.
    foreign = copy.deepcopy(doc)
    at = position(feed, "accept", "feed", 1)
    foreign["entries"][at] = feed["entries"][at]
    assert "foreign_entry: " in verify(foreign, *trusted).stderr

    # A checkpoint signed by another key; a segment of another inbox; a leaf-only entry
    # in a segment checked as whole; no key at all.
    other_private, _ = generate_key()
    resigned = sign_checkpoint(Checkpoint.from_json(cp), other_private).to_json()
    (tmp_path / "other.json").write_text(json.dumps(resigned))
    other = [*trusted[:-3], "other.json", "--public-key", f"{key}.pub"]
    assert "bad_signature: " in verify(doc, *other).stderr
    assert "wrong_inbox: " in verify(feed, *trusted, "--inbox", "ussd").stderr
    assert "withheld: " in verify(doc, *trusted, "--whole").stderr
    assert "wrong_range: " in verify(doc, "--from", "1", *trusted[2:]).stderr
    unkeyed = verify(doc, *checked)
    assert unkeyed.returncode == 2 and "--public-key" in unkeyed.stderr
    untrusted = json.loads(verify(doc, *checked, "--unsigned").stdout)
    assert untrusted["ok"] and not untrusted["trusted"]


def test_verify_feed_reads_standard_input_and_refuses_what_is_not_json(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'seg.db'}"
    fill(db)
    box = oncebox.open(db)
    private, public = generate_key()
    (tmp_path / "cp.json").write_text(json.dumps(box.checkpoint(private).to_json()))
    (tmp_path / "k.pub").write_bytes(public)
    size = box.checkpoint().tree_size
    segment = json.dumps(box.segment("ussd", 1, size)).encode()
    box.close()
    args = ["verify-feed", "--from", "1", "--to", str(size), "--checkpoint", "cp.json"]
    piped = subprocess.run(
        [sys.executable, "-m", "oncebox", *args, "--public-key", "k.pub", "-"],
        input=segment,
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert piped.returncode == 0, piped.stderr
    (tmp_path / "junk.json").write_text("{not json")
    junk = oncebox_cli(tmp_path, *args, "--public-key", "k.pub", "junk.json")
    assert junk.returncode == 2 and "not JSON" in junk.stderr
    (tmp_path / "bad-cp.json").write_text('{"origin": "o", "tree_size": -1}')
    (tmp_path / "segment.json").write_bytes(segment)
    bad = ["verify-feed", "--from", "1", "--to", str(size), "--checkpoint", "bad-cp.json"]
    refused = oncebox_cli(tmp_path, *bad, "--public-key", "k.pub", "segment.json")
    assert refused.returncode == 2 and refused.stderr.startswith("oncebox: error: malformed: ")
