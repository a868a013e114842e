"""Shared fixtures: every behavioural test runs against each store backend."""

from __future__ import annotations

import json
import os
import resource
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import settings

import oncebox
from oncebox import InboxSpec, ManualClock, Oncebox
from pgcluster import ExternalServer, PgCluster, throwaway_server

INBOXES = (
    InboxSpec("ussd", codec="ussd-h1", apply="triage"),
    InboxSpec("listing", codec="json-event", apply="generation"),
    InboxSpec("feed", codec="feed"),
)
SESSION = [
    ("rec1", "H1|1|Kakuma1|MED|3|86|#89"),
    ("rec2", "H1|2|Kakuma2|SHE|8|71|#09"),
    ("rec3", "H1|3|Kakuma1|WAT|12|69|#1a"),
]

BoxFactory = Callable[..., Oncebox]

# Hypothesis runs derandomized: each property tries the same examples on every run, so
# no submission lands or fails by chance, and no example database carries one machine's
# past failures into another run. No deadline: this machine's speed moves 2x between
# runs, and a slow example is not a wrong one. `ONCEBOX_HYPOTHESIS=explore` draws new
# examples (for hunting, never in CI).
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("ONCEBOX_HYPOTHESIS", "ci"))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


Server = PgCluster | ExternalServer
NO_POSTGRES = (
    "PostgreSQL server binaries not found: `bash test.sh` installs them from Debian's "
    "packages, or set ONCEBOX_TEST_PG to an existing server's admin URL"
)


def _start_server(durable: bool) -> Iterator[Server]:
    if not PgCluster.from_env() and not PgCluster.available():
        pytest.fail(NO_POSTGRES)
    with throwaway_server("oncebox-pg-", durable=durable) as server:
        yield server


def _template(server: Server) -> str:
    """A database holding the current schema, copied for each test in milliseconds."""
    name = f"oncebox_template_{uuid.uuid4().hex[:8]}"
    url = server.create_database(name)
    oncebox.open(url, inboxes=[]).close()  # runs the migrations
    return name


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    """One throwaway PostgreSQL server for the run (fsync off: fast, not crash-proof)."""
    yield from _start_server(durable=False)


@pytest.fixture(scope="session")
def pg_durable() -> Iterator[Server]:
    """A second server with real durability, for tests that crash it."""
    yield from _start_server(durable=True)


@pytest.fixture(scope="session")
def pg_template(pg_server: Server) -> str:
    return _template(pg_server)


def fresh_database(server: Server, template: str | None) -> Iterator[str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield server.create_database(name, template=template)
    server.drop_database(name)


@pytest.fixture
def pg_url(pg_server: Server, pg_template: str) -> Iterator[str]:
    """A fresh database for one test."""
    yield from fresh_database(pg_server, pg_template)


# A test that needs the PostgreSQL server (a process of its own, started once per run) is
# slow: the inner loop, `pytest -m "not slow"`, runs on SQLite alone and starts no server;
# `pytest -m postgres` runs the PostgreSQL tests alone, and test.sh runs everything.
POSTGRES = pytest.param("postgres", marks=[pytest.mark.slow, pytest.mark.postgres])
POSTGRES_FIXTURES = {"pg_server", "pg_durable"}


# The modules that take longest, longest first (each module's summed durations, from
# `pytest --durations=0` on four workers at 20aaecd, tmp files in /dev/shm as test.sh has
# them). test.sh has `--dist loadscope` hand modules out in collection order
# (`--no-loadscope-reorder`: xdist's own order, most tests first, left the campaigns of a
# few long tests to the end, each on one worker while the others had finished, as did
# name order). Started first, the short ones fill in behind them.
LONGEST_FIRST = (
    "reliability_forward", "reliability_fuzz", "schemathesis", "pg_edge_memo",
    "forward_serve", "reliability_powerloss", "log_positions", "postgres",
    "reliability_crashpoints", "console_day", "pgcluster", "security_unauthenticated",
    "webhook_budget", "console_access", "differential", "docs", "feed_serve",
    "dead_letter_serve", "console_desk", "security_lines", "upgrade_data",
    "forward_dispatch", "reconciler", "cpu_round_five", "cpu_round_four", "http",
    "reliability_history", "console_forwarding", "security_lists", "feed_cursor",
    "openapi", "properties",
)  # fmt: skip
_RANK = {f"test_{name}.py": rank for rank, name in enumerate(LONGEST_FIRST)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if POSTGRES_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.postgres)
    # A stable sort: each module's tests stay together and in their order.
    items.sort(key=lambda item: _RANK.get(item.path.name, len(_RANK)))


@pytest.fixture(params=["sqlite-memory", "sqlite-file", POSTGRES])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every backend: behavioural tests run once on each."""
    if request.param == "sqlite-memory":
        return "sqlite:///:memory:"
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=["sqlite-file", POSTGRES])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Backends several processes can share (an in-memory store cannot be)."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    return f"sqlite:///{tmp_path / 'shared.db'}"


@pytest.fixture
def make_box(store_url: str, clock: ManualClock) -> Iterator[BoxFactory]:
    """Open the parameterized store (again, for a reopen) with the given inboxes."""
    opened: list[Oncebox] = []

    def make(inboxes: Sequence[InboxSpec] = INBOXES) -> Oncebox:
        box = oncebox.open(store_url, inboxes=inboxes, clock=clock)
        opened.append(box)
        return box

    yield make
    for box in opened:
        box.close()


@pytest.fixture
def box(make_box: BoxFactory) -> Oncebox:
    return make_box()


# `ONCEBOX_TEST_CPU=FILE` appends one JSON line per test to FILE: its module, and the CPU
# seconds (user + system) the worker and the processes it started and waited for spent
# on it, its fixtures' set-up and tear-down included. docs/contributing.md sums them by
# module to find where the suite's CPU goes.
CPU_LOG = os.environ.get("ONCEBOX_TEST_CPU")


def _cpu_seconds() -> float:
    used = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        used += usage.ru_utime + usage.ru_stime
    return used


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    if not CPU_LOG:
        yield
        return
    before = _cpu_seconds()
    yield
    line = {"module": item.location[0], "test": item.nodeid, "cpu": _cpu_seconds() - before}
    with open(CPU_LOG, "a") as log:
        log.write(json.dumps(line) + "\n")
