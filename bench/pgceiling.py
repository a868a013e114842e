"""Ceiling on PostgreSQL: how near to psycopg's own insert oncebox's statements could come
with no client work at all.

bench/ceiling.py's question for the PostgreSQL store, asked on the wire. For each pass
(batched 1,000 new json-event deliveries, the same again as duplicates, then new ones one
at a time and those again) this runs, back to back:

- the baseline of bench/ingest.py: psycopg's ``executemany`` in one transaction a batch,
  or one insert and commit a delivery, into a table of (identity digest, witness);
- oncebox, timed the same way;
- **the replay**: the bytes oncebox's connections sent the server during that pass,
  recorded by a proxy on a copy of the database taken before the pass, sent again on a
  second copy by a bare socket loop. The replay waits where the client waited: before
  each chunk it reads until the server has answered with as many messages as the
  recorded client had received when it sent that chunk. So the server does the same work
  in the same round trips, and the client does none: no decoding, deciding, hashing,
  dumping or parsing of answers, not even psycopg's. Its rate is a ceiling for any client
  that sends these statements, and ``replay / baseline`` the best ratio oncebox could
  reach without asking the server for less.

The replay's copy is checked afterwards against the recorded one: the same records,
counts, log entries and verdict counts. A throwaway server (tests/pgcluster.py, fsync off
as bench/ingest.py's ``--pg-throwaway``) is started and stopped by the script. Targets
(issue 24: batched >= 0.4 of ``executemany``, one per transaction >= 0.5 of
insert-and-commit) are printed beside the ratios, never asserted.

    .venv/bin/python bench/pgceiling.py                      # N=20,000, --single-n 1,000
    .venv/bin/python bench/pgceiling.py --n 5000 --single-n 300
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import argparse
import itertools
import signal
import socket
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

import oncebox
from ceiling import FOOTPRINT, report
from ingest import PgBaseline, PgPlaces, deliveries, digests, open_box
from pgcluster import throwaway_server
from pgproxy import ASKS, ClientMessages, Relay, socket_path

INBOX, CODEC = "listing", "json-event"
PASSES = (("batched", "first"), ("batched", "dup"), ("single", "first"), ("single", "dup"))
TARGETS = {("batched", "first"): 0.4, ("single", "first"): 0.5}
PROTOCOL_3 = 196608
WARM = 2_000_000_000  # the warm-up delivery's number: outside every pass's


def log(message: str) -> None:
    print(f"[pgceiling] {message}", file=sys.stderr, flush=True)


def messages(buffer: bytearray) -> int:
    """How many whole server messages (a type byte, then a length) ``buffer`` starts
    with; those are cut off it."""
    count, at = 0, 0
    while len(buffer) - at >= 5:
        whole = 1 + int.from_bytes(buffer[at + 1:at + 5], "big")
        if len(buffer) - at < whole:
            break
        at += whole
        count += 1
    del buffer[:at]
    return count



@dataclass
class Chunk:
    """Bytes one connection sent; how many server messages it had been sent first; and
    whether the bytes ask for answers (a startup, Sync, Flush or simple Query), after
    which the client may wait for them."""

    conn: int
    data: bytes
    after: int
    asks: bool


@dataclass
class Recording:
    chunks: list[Chunk] = field(default_factory=list)
    answered: dict[int, int] = field(default_factory=dict)  # server messages per connection


class _Wire:
    """One recorded connection: its number, where its client's messages end, and its
    server's bytes not yet whole messages."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.messages = ClientMessages()
        self.pending = bytearray()


class Recorder(Relay):
    """A relay (tests/pgproxy.py) that keeps what every client sent, in order, and how
    many answers each connection had been sent."""

    def __init__(self, server_url: str) -> None:
        self.recording = Recording()
        self._lock = threading.Lock()
        self._numbers = itertools.count()
        super().__init__(server_url, "pgceiling-")

    def opened(self) -> _Wire:
        with self._lock:
            wire = _Wire(next(self._numbers))
            self.recording.answered[wire.number] = 0
        return wire

    def passing(self, state: _Wire, client: bool, data: bytes) -> None:
        if not client:
            return
        kinds = [kind for kind, _ in state.messages.feed(data)]
        asks = any(kind == b"" or kind in ASKS for kind in kinds)
        with self._lock:  # a connection of a recording taken already is not kept
            answered = self.recording.answered.get(state.number)
            if answered is not None:
                self.recording.chunks.append(Chunk(state.number, data, answered, asks))

    def passed(self, state: _Wire, client: bool, data: bytes) -> None:
        if client:
            return
        state.pending += data
        whole = messages(state.pending)
        with self._lock:  # counted once the client can have seen them
            if state.number in self.recording.answered:
                self.recording.answered[state.number] += whole

    def take(self) -> Recording:
        with self._lock:
            taken, self.recording = self.recording, Recording()
        return taken

    def mark(self) -> tuple[int, dict[int, int]]:
        """Where the recording is now: chunks so far, and each connection's answers."""
        with self._lock:
            return len(self.recording.chunks), dict(self.recording.answered)


def startup_for(data: bytes, database: str) -> bytes:
    """A startup message as recorded, with the database it names replaced."""
    size = int.from_bytes(data[:4], "big")
    if int.from_bytes(data[4:8], "big") != PROTOCOL_3:
        raise SystemExit("the recorded connection did not begin with a protocol 3 startup")
    fields = data[8:size - 1].split(b"\0")[:-1]  # each pair ends in a NUL, and so does the list
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    pairs[b"database"] = database.encode()
    body = PROTOCOL_3.to_bytes(4, "big") + b"".join(k + b"\0" + v + b"\0"
                                                   for k, v in pairs.items()) + b"\0"
    return (len(body) + 4).to_bytes(4, "big") + body + data[size:]


class Replayer:
    """Sends a recording's chunks on fresh connections to another database. Before a chunk
    that follows an ask, it reads until its connection has had the answers the recorded
    client had had when it sent that chunk; a client that has asked for nothing since it
    last read cannot be waiting, so neither does the replay."""

    def __init__(self, server_url: str, database: str) -> None:
        self._path = socket_path(server_url)
        self._database = database
        self._socks: dict[int, socket.socket] = {}
        self._pending: dict[int, bytearray] = {}
        self._answered: dict[int, int] = {}
        self._asked: dict[int, bool] = {}
        self.waits = 0  # round trips: times the replay had to read before it could go on

    def _wait(self, conn: int, answers: int) -> None:
        sock, pending = self._socks[conn], self._pending[conn]
        self.waits += self._answered[conn] < answers
        while self._answered[conn] < answers:
            data = sock.recv(1 << 16)
            if not data:
                raise SystemExit(f"the server closed replayed connection {conn}")
            pending += data
            self._answered[conn] += messages(pending)

    def run(self, chunks: Sequence[Chunk]) -> None:
        for chunk in chunks:
            data = chunk.data
            if chunk.conn not in self._socks:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self._path)
                self._socks[chunk.conn] = sock
                self._pending[chunk.conn] = bytearray()
                self._answered[chunk.conn] = 0
                self._asked[chunk.conn] = False
                data = startup_for(data, self._database)
            if self._asked[chunk.conn]:
                self._wait(chunk.conn, chunk.after)
                self._asked[chunk.conn] = False
            self._socks[chunk.conn].sendall(data)
            self._asked[chunk.conn] |= chunk.asks

    def settle(self, answered: dict[int, int]) -> None:
        for conn, answers in answered.items():
            if conn in self._socks:
                self._wait(conn, answers)

    def close(self) -> None:
        for sock in self._socks.values():
            sock.close()


def replay(server_url: str, database: str, recording: Recording,
           start: tuple[int, dict[int, int]], end: tuple[int, dict[int, int]]
           ) -> tuple[float, int]:
    """Replays ``recording`` and times its chunks from ``start`` to ``end`` (marks), each
    end waiting for the answers the recorded client had at that mark: the seconds, and the
    round trips the replay made in between."""
    replayer = Replayer(server_url, database)
    try:
        replayer.run(recording.chunks[:start[0]])
        replayer.settle(start[1])
        waits, began = replayer.waits, time.perf_counter()
        replayer.run(recording.chunks[start[0]:end[0]])
        replayer.settle(end[1])
        seconds, waits = time.perf_counter() - began, replayer.waits - waits
        replayer.run(recording.chunks[end[0]:])
    finally:
        replayer.close()
    return seconds, waits


def footprint(url: str) -> tuple[int, ...]:
    """What a pass leaves (bench/ceiling.py's FOOTPRINT), and the log's queue."""
    with psycopg.connect(url) as conn:
        return tuple(int(conn.execute(query).fetchone()[0])
                     for query in (*FOOTPRINT, "SELECT count(*) FROM log_pending"))


def box_pass(url: str, items: list[oncebox.Delivery], batch: int,
             recorder: Recorder | None = None) -> tuple[float, int, tuple[int, dict[int, int]],
                                                        tuple[int, dict[int, int]]]:
    """One oncebox pass on a fresh open (through the recorder if given): its seconds, how
    many were accepted, and the recorder's marks at its start and end."""
    box = open_box(recorder.via(url) if recorder else url)
    nothing: tuple[int, dict[int, int]] = (0, {})
    try:
        box.ingest(INBOX, deliveries(CODEC, WARM, 1)[0])  # connections open, plans made
        start = recorder.mark() if recorder else nothing
        began = time.perf_counter()
        if batch == 1:
            decisions = [box.ingest(INBOX, item) for item in items]
        else:
            decisions = [d for j in range(0, len(items), batch)
                         for d in box.ingest_batch(INBOX, items[j:j + batch])]
        seconds = time.perf_counter() - began
        end = recorder.mark() if recorder else nothing
    finally:
        box.close()
    return seconds, sum(d.verdict == oncebox.Verdict.ACCEPTED for d in decisions), start, end


def measure(server: Any, n: int, single_n: int, batch: int
            ) -> dict[tuple[str, str], dict[str, float]]:
    places = PgPlaces(server)
    recorder = Recorder(server.url("postgres"))
    items = {"batched": deliveries(CODEC, 0, n), "single": deliveries(CODEC, n, single_n)}
    rows = {mode: digests(CODEC, these) for mode, these in items.items()}
    store = places.fresh("store")
    open_box(store).close()  # the schema and the inboxes
    baseline = PgBaseline(places.fresh("baseline"))
    rates: dict[tuple[str, str], dict[str, float]] = {}
    try:
        for mode, step in PASSES:
            count, size = len(items[mode]), batch if mode == "batched" else 1
            want = count if step == "first" else 0
            recorded, replayed = places.fresh("recorded", store), places.fresh("replayed", store)
            seconds = (baseline.batched(rows[mode], batch) if mode == "batched" else
                       baseline.single(rows[mode]))
            base_rate = count / seconds
            seconds, new, _, _ = box_pass(store, items[mode], size)
            if new != want:
                raise SystemExit(f"oncebox {mode} {step}: {new} accepted, expected {want}")
            box_rate = count / seconds
            recorder.take()
            _, _, start, end = box_pass(recorded, items[mode], size, recorder)
            recording = recorder.take()
            database = urllib.parse.unquote(urllib.parse.urlsplit(replayed).path.lstrip("/"))
            seconds, waits = replay(server.url("postgres"), database, recording, start, end)
            replay_rate = count / seconds
            if footprint(recorded) != footprint(replayed):
                raise SystemExit(f"{mode} {step}: the replay did not do what the store did "
                                 f"({footprint(replayed)} against {footprint(recorded)})")
            places.drop(recorded)
            places.drop(replayed)
            sent = sum(len(c.data) for c in recording.chunks[start[0]:end[0]])
            rates[(mode, step)] = {"baseline": base_rate, "oncebox": box_rate,
                                   "replay": replay_rate, "bytes": sent / count,
                                   "trips": waits / count}
            log(f"{mode:7} {step:5} {count:>7,}: psycopg {base_rate:>8,.0f}, oncebox "
                f"{box_rate:>8,.0f}, its wire alone {replay_rate:>8,.0f} ev/s")
    finally:
        baseline.close()
        recorder.close()
        places.close()
    return rates


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000, help="deliveries per batched pass")
    p.add_argument("--single-n", type=int, default=1_000, help="deliveries one at a time")
    p.add_argument("--batch", type=int, default=1_000, help="deliveries per transaction")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: the server is stopped
    with throwaway_server("oncebox-pgceiling-") as server:
        log("throwaway server up")
        rates = measure(server, args.n, min(args.single_n, args.n), args.batch)
    report(f"oncebox {CODEC} on PostgreSQL against psycopg, and its own wire replayed (ev/s; "
           "baseline: executemany batched, insert and commit one at a time)", rates, "psycopg",
           TARGETS, [("bytes sent/ev", "bytes", ",.0f"), ("round trips/ev", "trips", ".3g")],
           "wire alone")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
