"""The ceilings' replays (bench/ceiling.py, bench/pgceiling.py) do what the store did.

A ceiling is only worth its figure if the replay sends the store's own statements, all of
them, in the store's round trips: these run both benchmarks small (their passes exit on a
replay whose copy differs from the recorded one) and check what they captured. Timings
are printed by the benchmarks, never asserted here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# Appended, not put first: bench/http.py would shadow the standard library's http.
sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))
import ceiling
import pgceiling
from pgproxy import ClientMessages


def test_the_sqlite_replay_sends_every_statement_of_the_pass(tmp_path: Path) -> None:
    rates = ceiling.measure(tmp_path, "keyed", 300, 40, 100, lambda _: None)
    assert set(rates) == set(ceiling.PASSES)
    # A duplicate alone is five statements (DESIGN.md's write budget): BEGIN, the lookup,
    # the record's count, the hour's count, COMMIT; a new one more.
    assert rates[("single", "dup")]["statements"] == 5.0
    assert rates[("single", "first")]["statements"] > 5.0
    assert all(r["replay"] > 0 and r["baseline"] > 0 and r["oncebox"] > 0 for r in rates.values())


def test_a_replay_that_leaves_work_out_is_caught(tmp_path: Path) -> None:
    store, whole, short = tmp_path / "box.db", tmp_path / "whole.db", tmp_path / "short.db"
    events = ceiling.make_events(30)
    ceiling.box_pass(store, "keyed", events, 1)  # 30 new
    ceiling.copy_store(store, whole)
    ceiling.copy_store(store, short)
    capture = ceiling.Capture()
    _, _, pass_ = ceiling.box_pass(store, "keyed", events, 1, capture)  # 30 duplicates
    statements = capture.take()
    capture.close()
    ceiling.replay(whole, statements, pass_.start, pass_.stop)
    assert ceiling.footprint(whole) == ceiling.footprint(store)
    counted = statements[pass_]
    uncounted = [s for s in counted if not s[1].startswith("UPDATE records SET seen_count")]
    assert len(uncounted) == len(counted) - 30
    kept = statements[: pass_.start] + uncounted + statements[pass_.stop :]
    ceiling.replay(short, kept, pass_.start, pass_.start + len(uncounted))
    assert ceiling.footprint(short) != ceiling.footprint(store)


def test_the_postgres_replay_takes_the_stores_round_trips(pg_server: Any) -> None:
    rates = pgceiling.measure(pg_server, 300, 20, 100)
    assert set(rates) == set(pgceiling.PASSES)
    # tests/test_pg_round_trips.py: at most three a single delivery; the replay waits only
    # where the recorded client had to.
    assert 0 < rates[("single", "first")]["trips"] <= 3
    assert 0 < rates[("batched", "first")]["trips"] < 0.1
    assert all(r["bytes"] > 0 for r in rates.values())


def test_the_wire_helpers() -> None:
    startup = pgceiling.startup_for(_startup({b"user": b"postgres", b"database": b"a"}), "bb")
    assert startup == _startup({b"user": b"postgres", b"database": b"bb"})
    stream = ClientMessages()
    parse, sync = b"P" + (4 + 3).to_bytes(4, "big") + b"\0\0\0", b"S\0\0\0\4"
    assert list(stream.feed(startup)) == [(b"", startup)]  # the startup has no type
    assert list(stream.feed(parse + sync[:2])) == [(b"P", parse)]  # half a Sync: not yet
    assert list(stream.feed(sync[2:])) == [(b"S", sync)]
    left = ClientMessages()  # a reader that stops at the startup still knows it began
    assert next(iter(left.feed(startup + parse))) == (b"", startup)
    assert list(left.feed(b"")) == [(b"P", parse)]
    ready = bytearray(b"Z\0\0\0\5I" + b"C\0\0\0\5")
    assert pgceiling.messages(ready) == 1 and ready == b"C\0\0\0\5"


def _startup(pairs: dict[bytes, bytes]) -> bytes:
    body = pgceiling.PROTOCOL_3.to_bytes(4, "big")
    body += b"".join(k + b"\0" + v + b"\0" for k, v in pairs.items()) + b"\0"
    return (len(body) + 4).to_bytes(4, "big") + body

