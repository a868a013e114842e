"""API tokens in the store (every backend), request signing, and the token commands."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import oncebox
from clirun import oncebox_in
from oncebox import InvalidOperation, ManualClock, NotFound, Oncebox, UnknownInbox
from oncebox.engine.tokens import (
    ReplayGuard,
    Scope,
    SignatureRefused,
    check_signature,
    secret_hash,
    sign,
    signing_message,
)


def test_create_authenticate_revoke(box: Oncebox) -> None:
    created = box.create_token("gw1", ["ussd"], ["write", "read"], hmac=True)
    assert created.secret.startswith("obx_") and len(created.secret) > 40
    token = box.authenticate(created.secret)
    assert token is not None and token.name == "gw1" and token.signs
    assert token.allows(Scope.WRITE, "ussd") and token.allows(Scope.READ, "ussd")
    assert not token.allows(Scope.WRITE, "listing") and not token.has(Scope.OPERATOR)
    assert box.authenticate(created.secret + "x") is None
    assert box.authenticate("not-a-token") is None
    listed = [t.to_dict() for t in box.list_tokens()]
    assert listed[0]["name"] == "gw1" and listed[0]["hmac"] is True
    assert created.secret not in json.dumps(listed) and "hmac_key" not in listed[0]
    box.revoke_token("gw1")
    assert box.authenticate(created.secret) is None
    with pytest.raises(NotFound):
        box.revoke_token("gw1")


def test_only_the_hash_is_stored(box: Oncebox) -> None:
    created = box.create_token("gw1", ["*"], ["read"])
    with box.store.reading() as tx:
        rows = tx.list_tokens(0, 10)
    assert rows[0].secret_hash == secret_hash(created.secret)
    assert created.secret not in repr(rows)


def test_names_are_unique_among_live_tokens(box: Oncebox) -> None:
    first = box.create_token("gw1", ["ussd"])
    with pytest.raises(InvalidOperation):
        box.create_token("gw1", ["ussd"])
    box.revoke_token("gw1")
    second = box.create_token("gw1", ["ussd"])
    assert box.authenticate(first.secret) is None
    assert box.authenticate(second.secret) is not None
    assert [t.revoked_at is None for t in box.list_tokens()] == [False, True]


def test_revoking_by_a_name_of_digits_never_revokes_the_token_of_that_id(box: Oncebox) -> None:
    """A live token named "2" is the one "2" names: the other token whose id is 2 stays
    live (both were revoked before); an id still revokes where no live name is that."""
    first = box.create_token("gw1", ["ussd"])
    second = box.create_token("gw2", ["ussd"])
    named = box.create_token(str(second.token.id), ["ussd"])
    box.revoke_token(named.token.name)
    assert box.authenticate(named.secret) is None
    assert box.authenticate(second.secret) is not None
    box.revoke_token(str(first.token.id))
    assert box.authenticate(first.secret) is None


def test_requests_for_tokens_are_checked(box: Oncebox) -> None:
    with pytest.raises(UnknownInbox):
        box.create_token("gw1", ["nosuch"])
    with pytest.raises(InvalidOperation):
        box.create_token("gw1", ["ussd"], ["admin"])
    with pytest.raises(InvalidOperation):
        box.create_token("bad name", ["ussd"])
    with pytest.raises(InvalidOperation):
        box.create_token("gw1", [])
    assert box.list_tokens() == []


def test_operator_implies_read(box: Oncebox) -> None:
    token = box.authenticate(box.create_token("op", ["*"], ["operator"]).secret)
    assert token is not None
    assert token.allows(Scope.READ, "listing") and token.allows(Scope.OPERATOR, "ussd")
    assert not token.has(Scope.WRITE)


def test_token_changes_are_logged_without_secrets(box: Oncebox) -> None:
    created = box.create_token("gw1", ["ussd"], hmac=True)
    box.revoke_token("gw1")
    entries = box.log_entries()
    steps = [e.step for e in entries]
    assert "token" in steps and "token_revoke" in steps
    text = " ".join(e.state for e in entries)
    assert created.secret not in text and str(created.token.hmac_key) not in text
    assert box.verify().ok


# -- request signing: pure -----------------------------------------------------------------
KEY = "k3y"
NOW = 1_800_000_000.0


def check(
    stamp: str | None,
    signature: str | None,
    method: str,
    target: str,
    body: bytes,
    key: str = KEY,
) -> str | None:
    """check_signature over a request with these two headers: why it is refused, or None."""
    headers = [
        (name, value.encode("latin-1"))
        for name, value in ((b"oncebox-timestamp", stamp), (b"oncebox-signature", signature))
        if value is not None
    ]
    try:
        check_signature(key, headers, method, target.encode("latin-1"), body, NOW)
    except SignatureRefused as exc:
        return str(exc)
    return None


def test_a_good_signature_passes() -> None:
    stamp = str(int(NOW))
    signature = sign(KEY, stamp, "POST", "/v1/inboxes/ussd/deliveries?x=1", b"body")
    assert signature.startswith("sha256=") and len(signature) == 7 + 64
    assert check(stamp, signature, "post", "/v1/inboxes/ussd/deliveries?x=1", b"body") is None


@pytest.mark.parametrize(
    ("stamp", "target", "body", "key"),
    [
        (str(int(NOW)), "/v1/other", b"body", KEY),  # another path
        (str(int(NOW)), "/v1/p", b"bodY", KEY),  # another body
        (str(int(NOW)), "/v1/p", b"body", "other"),  # another key
    ],
)
def test_anything_changed_fails(stamp: str, target: str, body: bytes, key: str) -> None:
    signature = sign(key, stamp, "POST", "/v1/p", b"body")
    assert check(stamp, signature, "POST", target, body) == "the request signature does not match"


@pytest.mark.parametrize("offset", [-301, 301, -10_000])
def test_timestamps_outside_the_window_fail(offset: int) -> None:
    stamp = str(int(NOW) + offset)
    refused = check(stamp, sign(KEY, stamp, "GET", "/v1/p", b""), "GET", "/v1/p", b"")
    assert refused is not None and "300 s" in refused


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_timestamps_inside_the_window_pass(offset: int) -> None:
    stamp = str(int(NOW) + offset)
    assert check(stamp, sign(KEY, stamp, "GET", "/v1/p", b""), "GET", "/v1/p", b"") is None


@pytest.mark.parametrize(
    ("stamp", "signature"),
    [(None, "sha256=00"), ("1", None), ("12.5", "sha256=00"), ("-5", "sha256=00"), ("", "x")],
)
def test_missing_or_malformed_headers_fail(stamp: str | None, signature: str | None) -> None:
    assert check(stamp, signature, "GET", "/", b"") is not None


def test_the_message_layout() -> None:
    message = signing_message("get", "/a?b=c", {"Oncebox-Timestamp": "5", "Oncebox-Key": ""}, b"xy")
    assert message == (
        b"oncebox-signature-v2\nGET\n/a?b=c\noncebox-timestamp:5\ncontent-type\n"
        b"oncebox-key:\noncebox-snapshot\noncebox-lease-token\noncebox-device-time\n"
        b"oncebox-delivery-id\nxy"
    )


def test_replay_guard_refuses_a_second_use_within_the_window() -> None:
    now = [NOW]
    guard = ReplayGuard(window=300, clock=lambda: now[0])
    aa, bb = b"\xaa" * 32, b"\xbb" * 32
    assert guard.first_use(aa)
    assert not guard.first_use(aa)
    assert guard.first_use(bb)
    now[0] += 601
    assert guard.first_use(aa)


def test_a_store_backed_replay_guard_is_shared_by_every_opener(
    shared_url: str, clock: ManualClock
) -> None:
    # Two openers of one store, as two server processes would be.
    first, second = (oncebox.open(shared_url, clock=clock) for _ in range(2))
    one = ReplayGuard(window=300, store=first.store)
    other = ReplayGuard(window=300, store=second.store)
    aa, bb = b"\xaa" * 32, b"\xbb" * 32
    assert one.first_use(aa)
    assert not other.first_use(aa), "a replay through another server"
    assert not one.first_use(aa)
    assert other.first_use(bb)
    clock.advance(601)  # both windows passed: the old use is forgotten
    assert other.first_use(aa)
    assert not one.first_use(aa)
    first.close()
    second.close()


# -- the commands ----------------------------------------------------------------------------
def run(tmp_path: Path, *args: str, ok: bool = True) -> subprocess.CompletedProcess[bytes]:
    """The first command a process, the rest in this one (tests/clirun.py)."""
    result = oncebox_in(tmp_path, "--db", f"sqlite:///{tmp_path / 'cli.db'}")(*args, text=False)
    assert (result.returncode == 0) is ok, result.stderr.decode()
    return result


@pytest.mark.slow
def test_token_commands(tmp_path: Path) -> None:
    made = json.loads(
        run(
            tmp_path,
            "token",
            "create",
            "gw1",
            "--inbox",
            "ussd",
            "--inbox",
            "feed",
            "--scope",
            "read",
            "--scope",
            "write",
            "--hmac",
        ).stdout
    )
    assert made["secret"].startswith("obx_") and made["hmac_key"]
    assert made["inboxes"] == ["feed", "ussd"] and made["scopes"] == ["read", "write"]
    listed = run(tmp_path, "token", "list").stdout.decode()
    assert "gw1" in listed and made["secret"] not in listed and made["hmac_key"] not in listed
    run(tmp_path, "token", "revoke", "gw1")
    assert json.loads(run(tmp_path, "token", "list").stdout)[0]["revoked_at"] is not None
    failed = run(tmp_path, "token", "revoke", "gw1", ok=False)
    assert failed.stderr.decode().startswith("oncebox: error: no live token")
    bad = run(tmp_path, "token", "create", "x", "--inbox", "nosuch", ok=False)
    assert "Traceback" not in bad.stderr.decode()
