"""The token listing a page at a time, each row bounded in bytes, on every backend:
through the library, the CLI as a process (the console's page is in
test_console_access.py), the long inbox lists cut as listings cut a text."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import oncebox
from clirun import oncebox_in
from conftest import INBOXES
from oncebox import ManualClock, Oncebox
from oncebox.engine.token_listing import _leading_names
from oncebox.engine.views import LISTED
from oncebox.surfaces import listing

ROW_BYTES = 1024  # the most one listed token takes as JSON: its inbox list is cut
LONG = [f"inbox-{i:03d}-{'x' * 50}" for i in range(200)]  # 12 KB of JSON names


def many_tokens(box: Oncebox, count: int) -> list[int]:
    """``count`` tokens, every tenth naming 200 long inboxes (as a store written under a
    configuration of many inboxes keeps them): their ids in order."""
    ids = []
    with box.store.transaction() as tx:
        for n in range(count):
            inboxes = json.dumps(LONG if n % 10 == 3 else ["ussd"])
            made = tx.insert_token(
                f"t-{n:04d}", secrets.token_bytes(32), inboxes, '["read"]', None, tx.now()
            )
            assert made is not None
            ids.append(made)
    return ids


def bounded(rows: list[dict[str, object]]) -> None:
    for row in rows:
        assert len(json.dumps(row).encode()) < ROW_BYTES, row["id"]
        assert "secret" not in row and "hmac_key" not in row
        if row["cut"]:
            assert row["cut"] == ["inboxes"]
            shown = row["inboxes"]
            assert isinstance(shown, list) and 0 < len(shown) < len(LONG)
            assert shown == LONG[: len(shown)]  # the names that fit, each whole


def test_pages_are_bounded_and_together_list_every_token_once(box: Oncebox) -> None:
    ids = many_tokens(box, 130)
    pages = list(listing.token_pages(box, 1000))
    assert [len(page) for page in pages] == [100, 30]
    for page in pages:
        bounded(page)
    assert [row["id"] for page in pages for row in page] == ids
    assert sum(1 for page in pages for row in page if row["cut"]) == 13
    newest, after = [], 0  # the console's order: newest first, each page below the last
    while found := box.list_tokens(after, 40, newest=True, preview=LISTED):
        newest += [t.id for t in found]
        after = found[-1].id
    assert newest == ids[::-1]
    assert box.list_tokens(ids[2], 1)[0].inboxes == tuple(LONG)  # no preview: whole
    assert list(listing.token_pages(box, 5, after=ids[-3])) == [
        [t.to_dict() for t in box.list_tokens(ids[-3], 5, preview=LISTED)]
    ]


@given(st.lists(st.text(min_size=1, max_size=12), max_size=30), st.integers(0, 400))
def test_a_cut_inbox_list_shows_the_names_it_holds_whole(names: list[str], at: int) -> None:
    whole = json.dumps(names)
    shown = _leading_names(whole[:at])
    assert shown == names[: len(shown)]
    if at >= len(whole):
        assert shown == names
    elif shown:  # no name shown beyond the cut
        assert whole[:at].startswith(json.dumps(shown)[:-1])


def test_the_cli_pages_tokens_with_after_and_limit(
    shared_url: str, clock: ManualClock, tmp_path: Path
) -> None:
    box = oncebox.open(shared_url, inboxes=INBOXES, clock=clock)
    try:
        ids = many_tokens(box, 75)
    finally:
        box.close()
    cli = oncebox_in(tmp_path, "--db", shared_url)
    seen: list[int] = []
    after = 0
    while True:  # the first call a real process, the others in this one
        done = cli("token", "list", "--json", "--limit", "30", "--after", str(after))
        assert done.returncode == 0, done.stderr
        rows = json.loads(done.stdout)
        if not rows:
            break
        assert len(rows) <= 30
        bounded(rows)
        seen += [row["id"] for row in rows]
        after = rows[-1]["id"]
    assert seen == ids
    refused = cli("token", "list", "--limit", "0")
    assert refused.returncode == 2 and "--limit" in refused.stderr


def test_one_token_is_shown_whole_by_its_live_name_else_its_newest_else_its_id(
    box: Oncebox,
) -> None:
    ids = many_tokens(box, 14)
    long_one = box.token("t-0003")
    assert long_one is not None and long_one.id == ids[3]
    assert long_one.inboxes == tuple(LONG) and long_one.cut == ()  # never cut
    box.revoke_token("t-0005")
    old = box.token("t-0005")  # no live token of that name: the newest that had it
    assert old is not None and old.id == ids[5] and old.revoked_at is not None
    again = box.create_token("t-0005", ["ussd"], ["read"]).token
    assert box.token("t-0005") == again  # a live name wins over the revoked one
    named_like_an_id = box.create_token(str(ids[1]), ["ussd"], ["read"]).token
    assert box.token(str(ids[1])) == named_like_an_id  # as revoking reads it
    by_id = box.token(str(ids[2]))
    assert by_id is not None and by_id.name == "t-0002"
    assert box.token("t-9999") is None and box.token("99999999999999999999") is None
    assert box.token("\u00b2") is None and box.token("\u0663") is None  # digits int() refuses


def test_the_cli_shows_one_token_whole(shared_url: str, clock: ManualClock, tmp_path: Path) -> None:
    box = oncebox.open(shared_url, inboxes=INBOXES, clock=clock)
    try:
        ids = many_tokens(box, 5)
    finally:
        box.close()
    cli = oncebox_in(tmp_path, "--db", shared_url)
    done = cli("token", "show", "t-0003", "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["id"] == ids[3] and shown["inboxes"] == LONG and shown["cut"] == []
    assert "secret" not in shown and "hmac_key" not in shown
    by_id = json.loads(cli("token", "show", str(ids[0]), "--json").stdout)
    assert by_id["name"] == "t-0000"
    missing = cli("token", "show", "nobody")
    assert missing.returncode == 2 and "no token named 'nobody'" in missing.stderr
    superscript = cli("token", "show", "\u00b2")  # a digit to isdigit(), not to int()
    assert superscript.returncode == 2 and "nor with that id" in superscript.stderr
