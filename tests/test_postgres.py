"""What only PostgreSQL can show: many processes on one database, skewed hosts, the
server killed under load, and a client killed inside its transaction."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import oncebox
from conftest import Server, fresh_database
from oncebox import Delivery, InboxSpec
from oncebox.errors import StorageUnavailable
from oncebox.formats.ussd_h1 import make_frame

pytestmark = pytest.mark.slow  # client processes, and PostgreSQL servers killed and restarted

USSD = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]


def run_children(
    script: str, args: list[list[str]], env: dict[str, str] | None = None, timeout: float = 180
) -> list[list[dict[str, Any]]]:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(script), *a],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        for a in args
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, err[-2000:]
        outputs.append([json.loads(line) for line in out.splitlines()])
    return outputs


STREAM = """
    import json, random, sys
    import oncebox
    from oncebox import Delivery, InboxSpec
    from oncebox.formats.ussd_h1 import make_frame

    url, seed = sys.argv[1], int(sys.argv[2])
    box = oncebox.open(url, inboxes=[InboxSpec("ussd", codec="ussd-h1", apply="triage")])
    rng = random.Random(seed)
    stream = [(i, 0) for i in range(300)]
    stream += [(i, 0) for i in rng.sample(range(300), 90)]          # 30% redeliveries
    stream += [(i, v) for i in range(0, 300, 15) for v in (1, 2)]   # conflicting variants
    rng.shuffle(stream)
    for start in range(0, len(stream), 25):
        chunk = stream[start:start + 25]
        deliveries = [Delivery(make_frame(i, "Site", "MED", i % 7 + 1 + 10 * v, 50).encode(),
                               key=f"rec{i}") for i, v in chunk]
        for decision in box.ingest_batch("ussd", deliveries):
            print(json.dumps({"identity": decision.identity, "verdict": str(decision.verdict),
                              "witness": decision.witness}))
    box.close()
"""


def test_eight_processes_share_one_stream(pg_url: str) -> None:
    outputs = run_children(STREAM, [[pg_url, str(seed)] for seed in range(8)])
    decisions = [d for out in outputs for d in out]
    accepted = [d["identity"] for d in decisions if d["verdict"] == "accepted"]
    assert sorted(accepted) == sorted(f"rec{i}" for i in range(300)), "exactly one each"
    with oncebox.open(pg_url, inboxes=USSD) as box:
        stats = box.stats("ussd")
        assert stats["records"] == 300
        # Apply-once: the ledger is the sum of what each record holds, decided once.
        total = 0
        for i in range(300):
            record = box.record("ussd", f"rec{i}")
            assert record is not None and record.content is not None
            total += int(record.content.decode().split("|")[4])
        triage = box.triage("ussd")
        assert triage["headcount"] == total and triage["cases"] == 300
        # Every distinct newcomer is quarantined exactly once, whichever variant won.
        rows = box.quarantined("ussd", status=None)
        assert len(rows) == len({(r.identity, r.witness) for r in rows}) == 20 * 2
        assert stats["verdicts"]["conflict"] == sum(d["verdict"] == "conflict" for d in decisions)
        report = box.verify()
        assert report.ok and report.uncovered == []


SKEWED = """
    import json, sys, time
    skew = float(sys.argv[3])
    real = time.time
    time.time = lambda: real() + skew   # this host's clock is wrong by `skew` seconds
    import oncebox
    from oncebox import Delivery, InboxSpec
    box = oncebox.open(sys.argv[1], inboxes=[InboxSpec("feed", codec="feed")])
    token = int(sys.argv[2])
    payload = sys.argv[4].encode()
    decision = box.ingest("feed", Delivery(payload, snapshot_id="S", lease_token=token,
                                           device_time=str(time.time())))
    print(json.dumps({"verdict": str(decision.verdict), "reason": decision.reason}))
"""


def test_hosts_with_skewed_clocks_agree_because_only_the_database_clock_counts(
    pg_url: str,
) -> None:
    # A lease long enough for the children to start on a busy machine: all inside it.
    with oncebox.open(pg_url, inboxes=[InboxSpec("feed", codec="feed")]) as box:
        token = box.lease("feed", "S", 120).token
    inside = run_children(
        SKEWED,
        [
            [pg_url, str(token), "600", "a"],
            [pg_url, str(token), "-600", "b"],
            [pg_url, str(token), "0", "c"],
        ],
    )
    assert [out[0]["verdict"] for out in inside] == ["accepted"] * 3
    # A short one, run out by the database's clock before any child starts: all past it.
    with oncebox.open(pg_url, inboxes=[InboxSpec("feed", codec="feed")]) as box:
        token = box.lease("feed", "S", 1).token
    time.sleep(1.5)
    after = run_children(
        SKEWED,
        [
            [pg_url, str(token), "600", "d"],
            [pg_url, str(token), "-600", "e"],
            [pg_url, str(token), "0", "f"],
        ],
    )
    assert [out[0]["reason"] for out in after] == ["expired_lease"] * 3


RETRYING = """
    import json, sys, time
    import oncebox
    from oncebox import Delivery, InboxSpec, StorageError
    from oncebox.formats.ussd_h1 import make_frame

    url, first, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    spec = [InboxSpec("ussd", codec="ussd-h1", apply="triage")]
    box = None
    errors = 0
    for i in range(first, first + count):
        frame = make_frame(i % 150, "Site", "MED", i % 150 % 7 + 1, 50).encode()
        before = errors
        while True:
            try:
                if box is None:
                    box = oncebox.open(url, inboxes=spec)
                decision = box.ingest("ussd", Delivery(frame, key=f"rec{i % 150}"))
                break
            except StorageError:
                errors += 1        # never acked: deliver again once the server is back
                time.sleep(0.2)
        print(json.dumps({"identity": decision.identity, "verdict": str(decision.verdict),
                          "may_ack": decision.may_ack, "retried": errors > before}),
              flush=True)
"""


@pytest.fixture
def durable_url(pg_durable: Server) -> Iterator[str]:
    if not getattr(pg_durable, "can_restart", False):
        pytest.skip("the server is external (ONCEBOX_TEST_PG); it cannot be killed here")
    yield from fresh_database(pg_durable, None)


def test_the_server_killed_under_load_loses_no_ack(pg_durable: Server, durable_url: str) -> None:
    # Four clients, overlapping identities; the server dies with -m immediate mid-stream.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RETRYING), durable_url, str(n * 40), "160"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    time.sleep(1.0)
    assert all(proc.poll() is None for proc in procs), "the clients must still be working"
    pg_durable.stop("immediate")  # type: ignore[union-attr]
    time.sleep(1.0)
    pg_durable.start_again()  # type: ignore[union-attr]
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0
        outputs.append([json.loads(line) for line in out.splitlines()])
    decisions = [d for out in outputs for d in out]
    assert len(decisions) == 4 * 160 and all(d["may_ack"] for d in decisions)
    # A client that was inside a transaction saw an error and delivered again; one that
    # was between transactions waited for the pool to reconnect. Either way, no ack lost.
    accepted = [d["identity"] for d in decisions if d["verdict"] == "accepted"]
    assert len(accepted) == len(set(accepted)), "never accepted twice"
    assert {d["verdict"] for d in decisions} <= {"accepted", "duplicate"}
    # An identity nobody saw accepted was committed by an attempt whose reply the kill
    # cut off; that client delivered again and was told, rightly, "duplicate".
    for identity in {f"rec{i}" for i in range(150)} - set(accepted):
        assert any(d["retried"] for d in decisions if d["identity"] == identity), identity
    with oncebox.open(durable_url, inboxes=USSD) as box:
        for decision in decisions:
            assert box.record("ussd", decision["identity"]) is not None
        assert box.stats("ussd")["records"] == 150
        assert box.triage("ussd")["headcount"] == sum(i % 7 + 1 for i in range(150))
        assert box.verify().ok


STUCK = """
    import sys, time
    import oncebox
    from oncebox import Delivery, InboxSpec
    from oncebox.engine.steps.triage import TRIAGE
    from oncebox.formats.ussd_h1 import make_frame

    def slow_triage(tx, change):
        TRIAGE.apply(tx, [change])
        print("inside", flush=True)
        time.sleep(120)                       # killed here, transaction open

    box = oncebox.open(sys.argv[1], inboxes=[InboxSpec("ussd", codec="ussd-h1",
                                                       apply=slow_triage)])
    box.ingest_batch("ussd", [Delivery(make_frame(i, "Site", "MED", 5, 50).encode(),
                                       key=f"rec{i}") for i in range(3)])
"""


def test_a_client_killed_inside_its_transaction_leaves_nothing(pg_url: str, tmp_path: Path) -> None:
    with oncebox.open(pg_url, inboxes=USSD):
        pass
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(STUCK), pg_url], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "inside"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    with oncebox.open(pg_url, inboxes=USSD) as box:
        deadline = time.monotonic() + 30
        while True:  # the server notices the dead client and rolls its transaction back
            try:
                decision = box.ingest(
                    "ussd",
                    oncebox.Delivery(make_frame(0, "Site", "MED", 5, 50).encode(), key="rec0"),
                )
                break
            except oncebox.StorageError:
                assert time.monotonic() < deadline
        assert str(decision.verdict) == "accepted"
        assert box.stats("ussd")["records"] == 1
        assert box.triage("ussd")["headcount"] == 5
        assert box.verify().ok


def test_reads_after_a_restart_are_served_on_fresh_connections(
    pg_durable: Server, durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every pooled connection dies with the server. One that rested less than the
    pool's check interval is handed out unchecked, and its first statement, the read's
    BEGIN, fails before anything ran: the store takes another connection instead of
    failing the read (as a write's transaction is run again)."""
    from oncebox.store import postgres

    monkeypatch.setattr(postgres, "IDLE_CHECK", 3600.0)  # never checked: as if just used
    with oncebox.open(durable_url, inboxes=USSD) as box:
        frame = make_frame(1, "Kakuma1", "MED", 3, 86).encode()
        box.ingest("ussd", Delivery(frame, key="rec1-1"))
        with box.store.reading() as one, box.store.reading() as two:  # two pooled
            assert one.now() > 0 and two.now() > 0
        pg_durable.stop("fast")  # type: ignore[union-attr]
        pg_durable.start_again()  # type: ignore[union-attr]
        assert box.record("ussd", "rec1-1") is not None
        assert box.stats("ussd")["records"] == 1
        assert box.ingest("ussd", Delivery(frame, key="rec1-1")).may_ack


def test_a_restart_between_the_relaxed_decision_and_its_seal_is_never_acked(
    pg_durable: Server, durable_url: str
) -> None:
    """A batch's decision commits without its own flush; only the seal's durable commit
    right after makes it durable, and only on the same server. If the server restarts in
    between, the decision may be gone with the unflushed WAL, and a seal on a freshly
    reconnected server covers nothing of it: the ingest must fail, not ack. (A single
    delivery is sealed in its own transaction, whose one commit is the durable one.)"""
    box = oncebox.open(durable_url, inboxes=USSD)
    try:
        real = box.store.atomic
        restarted = []

        def atomic(work: Any, durable: bool = True) -> Any:
            result = real(work, durable)
            if not durable and not restarted:
                restarted.append(True)
                pg_durable.stop("immediate")  # type: ignore[union-attr]
                pg_durable.start_again()  # type: ignore[union-attr]
            return result

        box.store.atomic = atomic  # type: ignore[method-assign]
        frame = make_frame(1, "Kakuma1", "MED", 3, 86).encode()
        other = make_frame(2, "Kakuma1", "MED", 3, 86).encode()
        with pytest.raises(StorageUnavailable):
            box.ingest_batch("ussd", [Delivery(frame, key="rec1-1"), Delivery(other)])
        assert restarted
        box.store.atomic = real  # type: ignore[method-assign]
        # Whatever the crash kept, a resend is decided against it and then acked.
        again = box.ingest("ussd", Delivery(frame, key="rec1-1"))
        assert again.may_ack and str(again.verdict) in ("accepted", "duplicate")
        assert box.record("ussd", "rec1-1") is not None
    finally:
        box.close()


def _crash_recovery(url: str) -> None:
    """One backend killed with SIGKILL: the postmaster takes the whole server through
    crash recovery (every other backend ended, shared memory and its WAL buffers thrown
    away, the WAL replayed from disk) without restarting itself, so
    pg_postmaster_start_time() stays what it was. Returns once a new connection finds
    none of the backends that were there before."""
    with psycopg.connect(url, autocommit=True) as victim:
        before = {pid for (pid,) in victim.execute("SELECT pid FROM pg_stat_activity")}
        os.kill(victim.info.backend_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the server did not come back from crash recovery"
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=3) as conn:
                now = {pid for (pid,) in conn.execute("SELECT pid FROM pg_stat_activity")}
        except psycopg.OperationalError:
            time.sleep(0.05)  # recovering: connections refused; ask again
            continue
        if not before & now:
            return


def test_crash_recovery_between_the_relaxed_decision_and_its_seal_is_never_acked(
    pg_durable: Server, durable_url: str
) -> None:
    """As a restart, so a crash recovery: a backend that dies by a signal has the
    postmaster reset the whole server, and a relaxed commit whose WAL was still in
    shared memory is gone, while the postmaster, and so its start time, stays. The seal
    on a fresh connection then commits durably on what looks like the same server run:
    the batch must fail, not be acknowledged."""
    box = oncebox.open(durable_url, inboxes=USSD)
    try:
        real = box.store.atomic
        crashed: list[bool] = []

        def atomic(work: Any, durable: bool = True) -> Any:
            result = real(work, durable)
            if not durable and not crashed:
                crashed.append(True)
                _crash_recovery(durable_url)
            return result

        box.store.atomic = atomic  # type: ignore[method-assign]
        batch = [
            Delivery(make_frame(i, "Kakuma1", "MED", 3, 86).encode(), key=f"rec{i}-{i}")
            for i in (1, 2)
        ]
        with pytest.raises(StorageUnavailable):
            box.ingest_batch("ussd", batch)
        assert crashed
        box.store.atomic = real  # type: ignore[method-assign]
        # Whatever the crash kept, a resend is decided against it and then acked.
        again = box.ingest_batch("ussd", batch)
        assert all(d.may_ack for d in again)
        assert {str(d.verdict) for d in again} <= {"accepted", "duplicate"}
        assert box.stats("ussd")["records"] == 2
    finally:
        box.close()


def test_a_write_finding_no_free_connection_is_storage_unavailable(pg_url: str) -> None:
    """Every connection taken (a server slow to come back, a pool too small): the write
    waits the pool's timeout and fails as StorageUnavailable, which callers retry and
    the service answers 503, never as the pool's own exception."""
    box = oncebox.open(pg_url, inboxes=[InboxSpec("ussd", codec="ussd-h1")])
    pool = box.store._pool  # type: ignore[attr-defined]
    pool.timeout = 0.2  # the wait for a connection, 30 s otherwise
    held = [pool.getconn(timeout=30) for _ in range(pool.max_size)]
    try:
        frame = make_frame(1, "K", "MED", 3, 86).encode()
        with pytest.raises(StorageUnavailable):
            box.ingest("ussd", Delivery(frame, key="k-1"))
    finally:
        for conn in held:
            pool.putconn(conn)
    assert box.ingest("ussd", Delivery(frame, key="k-1")).verdict == "accepted"
    box.close()
