"""A record's log position is its first log entry, on every backend, whatever seals it.

The rule (issue 24): the position a record answers everywhere (``log_seq`` through the
``records_read`` view, a duplicate's or a conflict's ``Decision.log_position``, what
``box.seal()`` maps it to, ``Record.log_seq`` from ``box.records``) is the ``seq`` of the
first log entry that names the record in the log's ``record_id`` column, and that entry
is its ``accept`` or recovery's ``recover``; a later entry naming it (the ``resolve`` that
accepted a newcomer as its next revision) never moves it.

A Hypothesis state machine drives one store per example through single and batched
deliveries (new, repeated, conflicting), operators resolving quarantined newcomers,
stores that seal inline or leave it to ``box.seal()``, a dedicated :class:`Sealer` that
holds the log, runs out and is taken over, and, where another process can share the
store, a writer killed with SIGKILL between its commit and its seal, followed by
``recover()``. After every step the positions are read back and checked against the
log, by SQL (``log_entries()`` does not give the ``record_id`` column). A few scripted
runs of the same machine make sure of the cases a derandomized search may not draw (one
seal of seven or more entries over a record and its revision: what PostgreSQL got wrong
before migration 27). Two answers broke the rule until it found them (``box.seal()``'s map,
PostgreSQL's decisions sealed after the commit); their own tests are at the end.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import oncebox
from oncebox import Decision, Delivery, InboxSpec, ManualClock, Oncebox
from oncebox.engine import crashpoints
from oncebox.engine.sealing import Sealer, StaleSealer

INBOXES = [InboxSpec("q", codec="keyed"), InboxSpec("r", codec="keyed")]
NAMES = [spec.name for spec in INBOXES]
KEYS = [f"k{n}" for n in range(6)]
BODIES = [b"a", b"b", b"c"]  # the same key with another body is a conflict
FIRST_STEPS = ("accept", "recover")
SEALER_TTL = 30.0

deliveries = st.tuples(st.sampled_from(KEYS), st.sampled_from(BODIES))

# The writer that dies: it ingests one batch, and the engine's crash hook (replaced
# here, in the child only) tells the parent it has reached the point after the commit,
# then waits there for the parent's SIGKILL.
CHILD = textwrap.dedent("""
    import json, sys, time
    import oncebox
    from oncebox import Delivery, InboxSpec, ManualClock
    from oncebox.engine import crashpoints

    url, now, seal, inbox, items = sys.argv[1:6]

    def reach(point):
        if point == crashpoints.AFTER_COMMIT:
            sys.stdout.write("at " + point + "\\n")
            sys.stdout.flush()
            while True:
                time.sleep(60)

    crashpoints.reach = reach
    crashpoints.ARMED = True
    inboxes = [InboxSpec("q", codec="keyed"), InboxSpec("r", codec="keyed")]
    box = oncebox.open(url, inboxes=inboxes, clock=ManualClock(float(now)), seal=seal == "1")
    batch = [Delivery(body.encode(), key=key) for key, body in json.loads(items)]
    box.ingest_batch(inbox, batch)
    sys.stdout.write("returned\\n")
""")


def killed_after_commit(
    url: str, now: float, seal: bool, inbox: str, items: list[tuple[str, bytes]]
) -> None:
    """Ingest ``items`` in a child process, SIGKILLed once its batch has committed."""
    sent = json.dumps([[key, body.decode()] for key, body in items])
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, url, repr(now), "1" if seal else "0", inbox, sent],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready, "the writer reached no crash point in 60 s"
        line = child.stdout.readline()  # EOF if it died or returned on its own
        assert line == f"at {crashpoints.AFTER_COMMIT}\n", line
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=60)
        if child.stdout is not None:
            child.stdout.close()


def check_positions(box: Oncebox) -> dict[int, list[int]]:
    """Every record's stored position is the lowest seq among the log entries that name
    it, an ``accept`` or ``recover``; a record no entry names has none; ``box.records``
    and ``box.verify`` agree. Returns record id -> the seqs of the entries naming it, in
    log order (the first is its position), for every record."""
    with box.store.reading() as tx:
        stored = {int(i): s for i, s in tx.execute("SELECT id, log_seq FROM records_read")}
        named = tx.execute(
            "SELECT record_id, seq, step FROM log WHERE record_id IS NOT NULL ORDER BY seq"
        )
    naming: dict[int, list[int]] = {record_id: [] for record_id in stored}
    first_step: dict[int, str] = {}
    for record_id, seq, step in named:
        assert int(record_id) in naming, f"entry {seq} ({step}) names no stored record"
        naming[int(record_id)].append(int(seq))
        first_step.setdefault(int(record_id), str(step))
    for record_id, position in stored.items():
        seqs = naming[record_id]
        if not seqs:
            assert position is None, f"record {record_id}: position {position}, no entry"
            continue
        assert first_step[record_id] in FIRST_STEPS, (
            f"record {record_id}: its first entry {seqs[0]} is a {first_step[record_id]}"
        )
        assert position == seqs[0], (
            f"record {record_id}: position {position}, but the entries naming it are {seqs}"
        )
    listed = {
        r.id: r.log_seq for name in NAMES for r in box.records(name, order="oldest", limit=1000)
    }
    assert listed == {record_id: seqs[0] if seqs else None for record_id, seqs in naming.items()}
    report = box.verify()
    assert report.broken_at is None, report.broken_why
    unsealed = {record_id for record_id, seqs in naming.items() if not seqs}
    assert set(report.uncovered) | set(report.queued) == unsealed  # stuck, or on its way
    assert not set(report.uncovered) & set(report.queued)
    return naming


# Answers are held to the record's first entry too. Two were not, found by this machine
# (the two tests at the end of this file): ``box.seal()``'s map, for a record an earlier
# seal sealed, and on PostgreSQL a decision about a record sealed after its commit
# together with a later entry naming it. False holds an answer to any entry naming it.
ANSWERS_FIRST = True


def check_answers(box: Oncebox, answered: dict[int, int]) -> None:
    """Stored positions as :func:`check_positions` checks them, and each position a call
    answered for a record (``answered``: record id -> position) is the record's first."""
    naming = check_positions(box)
    for record_id, position in answered.items():
        seqs = naming[record_id]
        if ANSWERS_FIRST:
            assert seqs and position == seqs[0], (
                f"record {record_id}: answered {position}, the entries naming it are {seqs}"
            )
        else:
            assert position in seqs, (
                f"record {record_id}: answered {position}, the entries naming it are {seqs}"
            )


def check_decisions(box: Oncebox, decisions: list[Decision]) -> None:
    """A decision that names a position (a duplicate's, a conflict's: its record's; an
    accepted one's, sealed with it) names the record's first one (see ANSWERS_FIRST),
    the same for every decision about it in one answer."""
    answered: dict[int, int] = {}
    for decision in decisions:
        if decision.log_position is not None:
            assert decision.record_id is not None
            assert answered.setdefault(decision.record_id, decision.log_position) == (
                decision.log_position
            ), f"two positions for record {decision.record_id} in one answer"
    check_answers(box, answered)


class Positions(RuleBasedStateMachine):
    """One store per example; ``url()`` gives it (set by the test)."""

    url: Any = None  # () -> (url, cleanup)
    shared = False  # whether a second process can open the store (not :memory:)

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(1_800_000_000.0)
        self.box: Oncebox | None = None
        self.sealer: Sealer | None = None
        self.crashed = False
        self.fresh = 0
        self.address, self.cleanup = type(self).url()

    @initialize(seal=st.booleans())
    def open_store(self, seal: bool) -> None:
        self.box = oncebox.open(self.address, inboxes=INBOXES, clock=self.clock, seal=seal)

    @property
    def b(self) -> Oncebox:
        assert self.box is not None
        return self.box

    def teardown(self) -> None:
        if self.box is not None:
            self.box.close()
        self.cleanup()

    # -- deliveries ----------------------------------------------------------------------
    @rule(inbox=st.sampled_from(NAMES), item=deliveries)
    def ingest(self, inbox: str, item: tuple[str, bytes]) -> None:
        key, body = item
        check_decisions(self.b, [self.b.ingest(inbox, Delivery(body, key=key))])

    @rule(inbox=st.sampled_from(NAMES), items=st.lists(deliveries, min_size=2, max_size=8))
    def ingest_batch(self, inbox: str, items: list[tuple[str, bytes]]) -> None:
        batch = [Delivery(body, key=key) for key, body in items]
        check_decisions(self.b, self.b.ingest_batch(inbox, batch))

    @rule(inbox=st.sampled_from(NAMES), count=st.integers(1, 8))
    def ingest_fresh(self, inbox: str, count: int) -> None:
        """Records no other step repeats: many entries for one seal to take."""
        batch = [Delivery(b"fresh", key=f"fresh{self.fresh + n}") for n in range(count)]
        self.fresh += count
        check_decisions(self.b, self.b.ingest_batch(inbox, batch))

    # -- operators -----------------------------------------------------------------------
    @rule(pick=st.integers(0, 20), action=st.sampled_from(["accept", "accept", "keep"]))
    def resolve(self, pick: int, action: str) -> None:
        waiting = self.b.quarantined()
        if not waiting:
            return
        row = waiting[pick % len(waiting)]
        self.b.resolve(row.id, action, "the sender meant it", actor="ops")

    # -- sealing -------------------------------------------------------------------------
    @rule()
    def seal(self) -> None:
        check_answers(self.b, self.b.seal())

    @precondition(lambda self: self.sealer is None)
    @rule()
    def take_the_log(self) -> None:
        """A dedicated sealer takes the log (any earlier one ran out or was let go)."""
        self.sealer = Sealer(self.b.store, f"dedicated-{uuid.uuid4().hex[:6]}", ttl=SEALER_TTL)
        self.sealer.acquire()

    @precondition(lambda self: self.sealer is not None)
    @rule()
    def dedicated_seal(self) -> None:
        assert self.sealer is not None
        try:
            self.sealer.seal()
        except StaleSealer:
            self.sealer = None  # its lease ran out and a writer's seal took the log over

    @precondition(lambda self: self.sealer is not None)
    @rule()
    def let_go(self) -> None:
        assert self.sealer is not None
        try:
            self.sealer.release()
        finally:
            self.sealer = None

    @rule()
    def pause_past_the_lease(self) -> None:
        """The server clock moves past a dedicated sealer's lease: the next seal a writer
        makes takes the log over (with whatever the sealer left queued)."""
        self.clock.advance(SEALER_TTL + 1)

    @precondition(lambda self: type(self).shared and not self.crashed)
    @rule(
        seal=st.booleans(),
        inbox=st.sampled_from(NAMES),
        items=st.lists(deliveries, min_size=1, max_size=4),
    )
    def writer_killed_after_commit(
        self, seal: bool, inbox: str, items: list[tuple[str, bytes]]
    ) -> None:
        """Another process's batch commits and the process is SIGKILLed before its seal
        (inline on PostgreSQL for a batch; queued where it seals later); recovery seals
        what it left, if no live dedicated sealer holds the log."""
        self.crashed = True  # once per example: a process start is the costly step
        killed_after_commit(self.address, self.clock.now, seal, inbox, items)
        self.b.recover(grace=0)

    @rule()
    def recover(self) -> None:
        """Recovery, as after a crash (no grace: whatever is queued counts as orphaned)."""
        self.b.recover(grace=0)

    @invariant()
    def first_positions(self) -> None:
        if self.box is not None:
            check_positions(self.box)


def machine_for(store_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> type[Positions]:
    """The machine on the parameterized backend: a fresh store for each run of it (the
    fixture's own first, then new files or databases; ``:memory:`` is new at each open)."""
    made = [0]

    def url() -> tuple[str, Any]:
        made[0] += 1
        if made[0] == 1 or store_url == "sqlite:///:memory:":
            return store_url, lambda: None
        if store_url.startswith("sqlite:"):
            return f"sqlite:///{tmp_path / f'store{made[0]}.db'}", lambda: None
        server = request.getfixturevalue("pg_server")
        name = f"t_{uuid.uuid4().hex[:12]}"
        address = server.create_database(name, template=request.getfixturevalue("pg_template"))
        return address, lambda: server.drop_database(name)

    class Machine(Positions):
        pass

    Machine.url = staticmethod(url)
    Machine.shared = store_url != "sqlite:///:memory:"
    return Machine


# Examples per backend, for about 30 s in all (100, 25 and 15 took 67 s in CI): an
# example on SQLite in memory costs a few milliseconds a step; in a file, the writer
# killed (a process started) weighs most; on PostgreSQL every step is a few round trips
# and every example a database. The scripted runs below take the known edges each time.
EXAMPLES = {"sqlite-memory": 50, "sqlite-file": 12, "postgres": 8}


def test_a_record_keeps_its_first_log_position(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    backend = request.node.callspec.params["store_url"]
    run_state_machine_as_test(
        machine_for(store_url, tmp_path, request),
        settings=settings(
            max_examples=EXAMPLES[backend],
            stateful_step_count=30,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


# Runs the machine's steps are sure to take, whatever Hypothesis draws: one seal that
# takes a record's first entry and the resolve that revised it among a dozen (PostgreSQL
# kept whichever its sort met first, only in a seal of seven or more), by ``box.seal()``,
# by a dedicated sealer, by a writer taking the log over from one that ran out, and by
# recovery after a writer was killed between its commit and its seal.
CONFLICTED = [("k0", b"a"), ("k0", b"b")]
SCRIPTS: dict[str, tuple[bool, list[tuple[str, dict[str, Any]]]]] = {
    "seal() over a record and its revision": (
        False,
        [
            ("ingest_fresh", {"inbox": "q", "count": 3}),
            ("ingest_batch", {"inbox": "q", "items": CONFLICTED}),
            ("ingest_fresh", {"inbox": "r", "count": 3}),
            ("resolve", {"pick": 0, "action": "accept"}),
            ("ingest_fresh", {"inbox": "q", "count": 3}),
            ("seal", {}),
            ("ingest", {"inbox": "q", "item": ("k0", b"b")}),
        ],
    ),
    "a dedicated sealer over a record and its revision": (
        True,
        [
            ("take_the_log", {}),
            ("ingest_fresh", {"inbox": "q", "count": 3}),
            ("ingest", {"inbox": "q", "item": ("k0", b"a")}),
            ("ingest_batch", {"inbox": "q", "items": [("k1", b"a"), ("k0", b"c")]}),
            ("resolve", {"pick": 0, "action": "accept"}),
            ("ingest_fresh", {"inbox": "r", "count": 4}),
            ("dedicated_seal", {}),
            ("let_go", {}),
            ("ingest_batch", {"inbox": "q", "items": [("k0", b"c"), ("k0", b"a")]}),
        ],
    ),
    "a writer takes the log over from a sealer that ran out": (
        True,
        [
            ("take_the_log", {}),
            ("ingest_batch", {"inbox": "q", "items": CONFLICTED}),
            ("ingest_fresh", {"inbox": "r", "count": 4}),
            ("resolve", {"pick": 0, "action": "accept"}),
            ("ingest_fresh", {"inbox": "q", "count": 2}),
            ("pause_past_the_lease", {}),
            ("ingest_batch", {"inbox": "q", "items": [("k0", b"b"), ("k5", b"a")]}),
            ("dedicated_seal", {}),
        ],
    ),
    "recovery after a writer killed between its commit and its seal": (
        True,
        [
            ("take_the_log", {}),  # recovery leaves the queue to it, while it lives
            ("ingest_fresh", {"inbox": "q", "count": 2}),
            (
                "writer_killed_after_commit",
                {"seal": True, "inbox": "q", "items": [*CONFLICTED, ("k1", b"a"), ("k2", b"a")]},
            ),
            ("ingest_fresh", {"inbox": "r", "count": 3}),
            ("resolve", {"pick": 0, "action": "accept"}),
            ("pause_past_the_lease", {}),
            ("recover", {}),
            ("ingest", {"inbox": "q", "item": ("k0", b"a")}),
        ],
    ),
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_record_keeps_its_first_log_position_in_these_runs(
    store_url: str, tmp_path: Path, request: pytest.FixtureRequest, script: str
) -> None:
    machine = machine_for(store_url, tmp_path, request)()
    seal, steps = SCRIPTS[script]
    if "writer_killed_after_commit" in dict(steps) and not machine.shared:
        machine.teardown()
        pytest.skip("no second process can open an in-memory store")
    try:
        machine.open_store(seal=seal)
        machine.first_positions()
        for step, arguments in steps:
            getattr(machine, step)(**arguments)
            machine.first_positions()
    finally:
        machine.teardown()


# -- two answers that gave a later position (found by the machine above) -----------------


def test_a_seal_answers_a_record_sealed_before_with_its_first_position(
    store_url: str, clock: ManualClock
) -> None:
    with oncebox.open(store_url, inboxes=INBOXES, clock=clock, seal=False) as box:
        first = box.ingest("q", Delivery(b"a", key="k0"))
        assert first.record_id is not None
        assert box.seal() == {first.record_id: 1}
        newcomer = box.ingest("q", Delivery(b"b", key="k0"))
        assert newcomer.quarantine_id is not None
        box.resolve(newcomer.quarantine_id, "accept", "the sender meant it", actor="ops")
        sealed = box.seal()  # the quarantine and the resolve (entries 2 and 3)
        assert check_positions(box)[first.record_id] == [1, 3]
        assert sealed.get(first.record_id, 1) == 1


@pytest.mark.parametrize("how", ["duplicate in a batch", "single conflict"])
def test_a_decision_sealed_with_its_records_revision_answers_the_first_position(
    store_url: str, clock: ManualClock, how: str
) -> None:
    """A record and the resolve that revised it wait for a dedicated sealer that pauses
    past its lease; a delivery about the record is decided (its position unknown yet) and
    its seal takes the log over, sealing both: the decision answers the first."""
    with oncebox.open(store_url, inboxes=INBOXES, clock=clock) as box:
        Sealer(box.store, "dedicated", ttl=SEALER_TTL).acquire()
        first = box.ingest("q", Delivery(b"a", key="k0"))  # left to the sealer
        newcomer = box.ingest("q", Delivery(b"b", key="k0"))
        assert newcomer.quarantine_id is not None
        box.resolve(newcomer.quarantine_id, "accept", "the sender meant it", actor="ops")
        clock.advance(SEALER_TTL + 1)
        if how == "single conflict":
            [decision] = [box.ingest("q", Delivery(b"c", key="k0"))]
        else:
            decision, _ = box.ingest_batch(
                "q", [Delivery(b"b", key="k0"), Delivery(b"new", key="k1")]
            )
        assert decision.record_id == first.record_id is not None
        seqs = check_positions(box)[first.record_id]
        assert seqs[0] < seqs[1]
        assert decision.log_position in (None, seqs[0])
