"""Issue 23, item 5 (access): tokens that expire, and their last use kept to the minute,
on every backend; their times in ISO 8601; the admin scope."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest

import oncebox
from conftest import INBOXES
from oncebox import InvalidOperation, ManualClock, Oncebox, TokenExpired
from oncebox.engine.sessions import Sessions
from oncebox.engine.token_times import TOUCH_EVERY, expiry
from oncebox.engine.tokens import Scope

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
DAY = 86400.0


def test_a_token_expires_on_the_server_clock(box: Oncebox, clock: ManualClock) -> None:
    created = box.create_token("short", ["*"], ["read"], expires="2h")
    assert created.token.expires_at == clock.now + 2 * 3600
    assert box.authenticate(created.secret) is not None
    clock.advance(2 * 3600 - 1)
    assert box.authenticate(created.secret) is not None
    clock.advance(1)
    with pytest.raises(TokenExpired, match=r"token 'short' expired at \d{4}-"):
        box.authenticate(created.secret)
    # Still listed, never deleted: its times are the audit trail.
    assert [t.name for t in box.list_tokens()] == ["short"]


def test_an_expiry_is_a_duration_or_a_time_in_the_future(box: Oncebox, clock: ManualClock) -> None:
    at = datetime.fromtimestamp(clock.now + 3 * DAY, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert box.create_token("t1", ["*"], ["read"], expires=at).token.expires_at == pytest.approx(
        clock.now + 3 * DAY, abs=1
    )
    assert box.create_token("t2", ["*"], ["read"], expires="30d").token.expires_at == (
        clock.now + 30 * DAY
    )
    for wrong in ["2001-01-01T00:00Z", "yesterday", "-3d", "forever", "400w0"]:
        with pytest.raises(InvalidOperation):
            box.create_token("t3", ["*"], ["read"], expires=wrong)
    with pytest.raises(InvalidOperation, match="ten years"):
        expiry("9999d", clock.now)
    assert [t.name for t in box.list_tokens()] == ["t1", "t2"]  # nothing made by a refusal


def test_an_expired_tokens_console_session_ends(box: Oncebox, clock: ManualClock) -> None:
    token = box.create_token("reader", ["*"], ["read"], expires="1h").token
    sessions = Sessions(box.store)
    session_id = sessions.open(token)
    assert sessions.find(session_id) is not None
    clock.advance(3600)
    assert sessions.find(session_id) is None


def test_last_use_is_written_at_most_once_a_minute(box: Oncebox, clock: ManualClock) -> None:
    """Measured: a burst of 200 lookups writes once; a minute later, once more."""
    secret = box.create_token("busy", ["*"], ["read"]).secret
    written: list[float] = []
    real = box.store.atomic

    def counting(fn, *args, **kwargs):  # type: ignore[no-untyped-def]
        written.append(clock.now)
        return real(fn, *args, **kwargs)

    box.store.atomic = counting  # type: ignore[method-assign]
    try:
        for _ in range(200):
            clock.advance(0.1)
            assert box.authenticate(secret) is not None
    finally:
        box.store.atomic = real  # type: ignore[method-assign]
    assert len(written) == 1  # 200 uses over 20 s of server clock: one write
    first = box.list_tokens()[0].last_used_at
    assert first == written[0]
    clock.advance(TOUCH_EVERY)
    box.authenticate(secret)
    assert box.list_tokens()[0].last_used_at == clock.now  # a minute on: kept again


def test_another_process_does_not_write_a_fresh_last_use_again(
    shared_url: str, clock: ManualClock
) -> None:
    """Two processes (two boxes on one store): the second sees the kept time is fresh
    and writes nothing; past the minute, it writes."""
    with oncebox.open(shared_url, inboxes=INBOXES, clock=clock) as first:
        secret = first.create_token("shared", ["*"], ["read"]).secret
        first.authenticate(secret)
        kept = first.list_tokens()[0].last_used_at
        clock.advance(10)
        with oncebox.open(shared_url, inboxes=INBOXES, clock=clock) as second:
            second.authenticate(secret)
            assert second.list_tokens()[0].last_used_at == kept
            clock.advance(TOUCH_EVERY)
            second.authenticate(secret)
            assert first.list_tokens()[0].last_used_at == clock.now


def test_token_times_are_iso_8601(box: Oncebox, clock: ManualClock) -> None:
    box.create_token("t", ["*"], ["read"], expires="1d")
    box.create_token("gone", ["*"], ["read"])
    box.revoke_token("gone")
    secret = box.create_token("used", ["*"], ["read"]).secret
    box.authenticate(secret)
    listed = {t.name: t.to_dict() for t in box.list_tokens()}
    assert ISO.fullmatch(listed["t"]["created_at"]) and ISO.fullmatch(listed["t"]["expires_at"])
    assert listed["t"]["last_used_at"] is None and listed["t"]["revoked_at"] is None
    assert ISO.fullmatch(listed["gone"]["revoked_at"])
    assert ISO.fullmatch(listed["used"]["last_used_at"])


def test_admin_is_for_every_inbox_and_implies_operator(box: Oncebox) -> None:
    with pytest.raises(InvalidOperation, match="every inbox"):
        box.create_token("a", ["ussd"], ["admin"])
    token = box.authenticate(box.create_token("a", ["*"], ["admin"]).secret)
    assert token is not None and token.has(Scope.OPERATOR) and token.has(Scope.READ)
    assert not token.has(Scope.WRITE)


def test_revoking_logs_who_did(box: Oncebox) -> None:
    box.create_token("t", ["*"], ["read"], actor="root")
    box.revoke_token("t", actor="root")
    steps = [(e.step, json.loads(e.state)) for e in box.log_entries()][-2:]
    assert steps[0][0] == "token" and steps[0][1]["actor"] == "root"
    assert steps[1] == ("token_revoke", {"token": "t", "actor": "root"})
