"""The log's command line, end to end: lease, ingest, checkpoint, prove, verify offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import apsw
import pytest

from clirun import oncebox_in

pytestmark = pytest.mark.slow  # every test runs the oncebox command as a process


def run(tmp_path: Path, *args: str, stdin: bytes = b"", code: int = 0) -> Any:
    """``oncebox`` on the test's store: its first call a process, the rest in this one."""
    oncebox = oncebox_in(tmp_path, "--db", f"sqlite:///{tmp_path / 'log.db'}")
    result = oncebox(*args, stdin=stdin, text=False)
    assert result.returncode == code, result.stderr.decode()
    return result


def emitted(result: Any) -> Any:
    return json.loads(result.stdout)


def feed_rows(token: int, *payloads: str, scope: str = "S1") -> bytes:
    return b"".join(
        json.dumps({"payload": p, "snapshot_id": scope, "lease_token": token}).encode() + b"\n"
        for p in payloads
    )


def test_lease_ingest_prove_and_verify_offline(tmp_path: Path) -> None:
    lease = emitted(run(tmp_path, "lease", "feed", "S1", "--ttl", "5m"))
    assert lease["token"] >= 1 and lease["scope"] == "S1"
    decisions = [
        json.loads(line)
        for line in run(
            tmp_path, "ingest", "feed", stdin=feed_rows(lease["token"], "row-A", "row-B", "row-A")
        ).stdout.splitlines()
    ]
    assert [d["verdict"] for d in decisions] == ["accepted", "accepted", "duplicate"]
    assert decisions[0]["log_position"] == 2
    stale = json.loads(run(tmp_path, "ingest", "feed", stdin=feed_rows(99, "row-C")).stdout)
    assert (stale["reason"], stale["may_ack"]) == ("stale_token", False)

    run(tmp_path, "keygen", str(tmp_path / "audit.key"))
    (tmp_path / "cp.json").write_bytes(
        run(tmp_path, "checkpoint", "--sign", str(tmp_path / "audit.key")).stdout
    )
    (tmp_path / "proof.json").write_bytes(run(tmp_path, "prove", "1").stdout)
    key = str(tmp_path / "audit.key.pub")
    # No database from here on: the auditor has the proof, the checkpoint and the key.
    (tmp_path / "log.db").rename(tmp_path / "elsewhere.db")
    report = emitted(
        run(tmp_path, "verify-proof", "proof.json", "--checkpoint", "cp.json", "--public-key", key)
    )
    assert report["ok"] and report["signed"]
    other_key = tmp_path / "other.key"
    run(tmp_path, "keygen", str(other_key))
    forged = run(
        tmp_path,
        "verify-proof",
        "proof.json",
        "--checkpoint",
        "cp.json",
        "--public-key",
        f"{other_key}.pub",
        code=2,
    )
    assert b"signed by key" in forged.stderr
    (tmp_path / "elsewhere.db").rename(tmp_path / "log.db")

    assert emitted(run(tmp_path, "verify", "--against", "cp.json"))["ok"]
    run(tmp_path, "lease", "feed", "S2")
    (tmp_path / "cp2.json").write_bytes(run(tmp_path, "checkpoint").stdout)
    old_size = json.loads((tmp_path / "cp.json").read_text())["tree_size"]
    (tmp_path / "consistency.json").write_bytes(
        run(tmp_path, "prove", "--from-size", str(old_size)).stdout
    )
    consistent = emitted(
        run(
            tmp_path,
            "verify-proof",
            "consistency.json",
            "--checkpoint",
            "cp2.json",
            "--old-checkpoint",
            "cp.json",
            "--unsigned",  # cp2.json is not signed (tests/test_security_unsigned.py)
        )
    )
    assert consistent["ok"] and consistent["kind"] and consistent["trusted"] is False


def test_verify_exit_status_names_the_problem(tmp_path: Path) -> None:
    token = emitted(run(tmp_path, "lease", "feed", "S1"))["token"]
    run(tmp_path, "ingest", "feed", stdin=feed_rows(token, "row-A", "row-B"))
    run(tmp_path, "lease", "feed", "S2")
    (tmp_path / "cp.json").write_bytes(run(tmp_path, "checkpoint").stdout)
    assert emitted(run(tmp_path, "verify"))["ok"]
    conn = apsw.Connection(str(tmp_path / "log.db"))
    conn.execute("DELETE FROM log WHERE seq = 4")  # the tail: the second lease
    conn.execute("DELETE FROM merkle_nodes WHERE level = 0 AND idx = 3")
    conn.execute(
        "DELETE FROM merkle_nodes WHERE level > 0 AND idx * (1 << level) + (1 << level) > 3"
    )
    conn.close()
    assert emitted(run(tmp_path, "verify"))["ok"], "a truncated tail is still a valid chain"
    mismatch = emitted(run(tmp_path, "verify", "--against", "cp.json", code=5))
    assert mismatch["checkpoint_ok"] is False
    conn = apsw.Connection(str(tmp_path / "log.db"))
    conn.execute("UPDATE log SET state = state || ' ' WHERE seq = 2")
    conn.close()
    broken = emitted(run(tmp_path, "verify", code=3))
    assert broken["broken_at"] == 2


def test_lease_errors_are_one_line(tmp_path: Path) -> None:
    for args in (
        ("lease", "ussd", "S"),
        ("lease", "feed", "S", "--ttl", "0"),
        ("lease", "nope", "S"),
    ):
        result = run(tmp_path, *args, code=2)
        assert result.stderr.decode().startswith("oncebox: error: ")
        assert result.stderr.count(b"\n") == 1


def test_a_json_file_nested_too_deep_is_a_clear_error_not_an_internal_one(
    tmp_path: Path,
) -> None:
    # Python's JSON reader gives up nesting past its recursion limit with RecursionError,
    # which is no ValueError: such a file was reported as an internal error (exit 70).
    (tmp_path / "deep.json").write_text("[" * 100_000)
    run(tmp_path, "checkpoint")  # makes the store
    (tmp_path / "cp.json").write_bytes(run(tmp_path, "checkpoint").stdout)
    for args in (
        ("verify", "--against", "deep.json"),
        ("verify-proof", "deep.json", "--checkpoint", "cp.json", "--unsigned"),
        ("verify-proof", "cp.json", "--checkpoint", "deep.json", "--unsigned"),
        ("verify-feed", "--from", "1", "--to", "1", "--checkpoint", "cp.json", "--unsigned",
         "deep.json"),
    ):  # fmt: skip
        result = run(tmp_path, *args, code=2)
        assert "deep.json is not JSON" in result.stderr.decode(), args


def test_prove_a_record_id_past_64_bits_is_a_clear_error(tmp_path: Path) -> None:
    # The id went to the store as it was and overflowed its integer: an internal error.
    run(tmp_path, "lease", "feed", "S1")
    result = run(tmp_path, "prove", str(2**63), code=2)
    message = result.stderr.decode()
    assert message.startswith("oncebox: error: ") and "internal" not in message, message


def test_keygen_never_leaves_the_private_key_readable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The private key was written with the umask's mode (0644 as usual) and narrowed to
    # 0600 after: for that moment another local user could read the signing key. It is
    # made 0600 from the start now (seen here with the chmod after it made a no-op).
    from click.testing import CliRunner

    from oncebox.surfaces.cli import cli

    monkeypatch.setattr(Path, "chmod", lambda self, mode: None)
    key = tmp_path / "audit.key"
    result = CliRunner().invoke(cli, ["keygen", str(key)])
    assert result.exit_code == 0, result.output
    assert key.stat().st_mode & 0o077 == 0, oct(key.stat().st_mode)
    again = CliRunner().invoke(cli, ["keygen", str(key)])
    assert again.exit_code != 0 and "refusing to overwrite" in again.output
