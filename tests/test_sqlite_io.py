"""What the SQLite store asks of the disk and the kernel: its page cache and its checkpoints
(and, beside them, the statement text APSW hashes on every run).

Each connection's page cache is large enough that a batch's dirty pages are not spilled
into the WAL before the commit (a spilled page that the batch dirties again is written
twice and read back), and a commit checkpoints only once the WAL passes
``wal_autocheckpoint`` pages, so the WAL stays bounded. Both are set on every connection
the store opens, readers included, and can be changed in the store's URL.
"""

from __future__ import annotations

import re
import struct
import sys
import threading
import uuid
from pathlib import Path

import apsw
import pytest

import oncebox
from oncebox.errors import ConfigError
from oncebox.store.sqlite import CACHE_MB, WAL_AUTOCHECKPOINT, SQLiteStore
from oncebox.store.sqlitetx import _TEXT, Q

# Appended, not put first: bench/http.py would shadow the standard library's http.
sys.path.append(str(Path(__file__).resolve().parents[1] / "bench"))
import walcount

KEYED = oncebox.InboxSpec("k", codec="keyed")
FRAME_HEADER, WAL_HEADER = 24, 32


def keyed(i: int, size: int = 215) -> oncebox.Delivery:
    """A delivery under a random-looking key (spread over the whole identity index)."""
    key = uuid.UUID(int=(i * 2654435761) % 2**122 + 1, version=4)
    return oncebox.Delivery(b"x" * size, key=str(key))


def settings(store: SQLiteStore) -> tuple[int, int]:
    """This thread's connection's page cache (in KiB, negative) and checkpoint threshold."""
    conn = store._connect()
    return conn.execute("PRAGMA cache_size").get, conn.execute("PRAGMA wal_autocheckpoint").get


def wal_pages(wal: Path) -> list[int]:
    """The page number of each frame in a WAL file, in order."""
    data = wal.read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    return [
        struct.unpack(">I", data[at : at + 4])[0]
        for at in range(
            WAL_HEADER, len(data) - FRAME_HEADER - page_size + 1, FRAME_HEADER + page_size
        )
    ]


def test_every_connection_the_store_opens_has_its_cache_and_checkpoint_settings(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.db")
    expected = (-1024 * CACHE_MB, WAL_AUTOCHECKPOINT)
    assert expected == (-16384, 1000)
    store = SQLiteStore(path)
    try:
        assert settings(store) == expected
        with store.reading():  # a reading snapshot is this thread's connection too
            assert settings(store) == expected
        seen: list[tuple[int, int]] = []
        other = threading.Thread(target=lambda: seen.append(settings(store)))
        other.start()
        other.join()
        assert seen == [expected]  # another thread's own connection
    finally:
        store.close()
    reader = SQLiteStore(path, read_only=True)
    try:
        assert settings(reader) == expected
    finally:
        reader.close()
    memory = SQLiteStore(":memory:")
    try:
        assert settings(memory)[0] == expected[0]
    finally:
        memory.close()


def test_the_url_sets_them(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}?cache_mb=3&wal_autocheckpoint=250"
    with oncebox.open(url, inboxes=[KEYED]) as box:
        assert isinstance(box.store, SQLiteStore)
        assert settings(box.store) == (-3072, 250)
    with oncebox.open(url, read_only=True) as box:
        assert isinstance(box.store, SQLiteStore)
        assert settings(box.store) == (-3072, 250)


@pytest.mark.parametrize(
    "option",
    [
        "cache_mb=0",
        "cache_mb=-4",
        "cache_mb=lots",
        "wal_autocheckpoint=0",
        "wal_autocheckpoint=1.5",
    ],
)
def test_a_setting_that_is_not_a_whole_number_of_at_least_one_is_refused(
    tmp_path: Path, option: str
) -> None:
    with pytest.raises(ConfigError, match=option.split("=")[0]):
        oncebox.open(f"sqlite:///{tmp_path / 'r.db'}?{option}", inboxes=[KEYED])


def test_the_wal_stays_within_its_checkpoint_threshold_and_a_batch(tmp_path: Path) -> None:
    """The WAL file grows to its threshold plus the commit that passed it, never more:
    each checkpoint lets the next writer start the WAL over."""
    threshold, batch = 128, 100
    db = tmp_path / "w.db"
    most, largest, written = 0, 0, 0
    with walcount.counting() as counter:
        url = f"sqlite:///{db}?vfs={counter.vfs_name}&wal_autocheckpoint={threshold}"
        with oncebox.open(url, inboxes=[KEYED]) as box:
            for start in range(0, 60 * batch, batch):
                _, counts = counter.measure(
                    lambda s=start: box.ingest_batch("k", [keyed(i) for i in range(s, s + batch)])
                )
                largest, written = max(largest, counts.pages), written + counts.pages
                most = max(most, len(wal_pages(Path(f"{db}-wal"))))
    assert largest < threshold  # each batch alone fits
    assert written > 10 * threshold  # and many thresholds' worth went through the WAL
    assert most < threshold + largest


def test_a_batch_writes_each_page_once_into_a_store_of_45000(tmp_path: Path) -> None:
    """A batch of 1,000 under random keys into 45,000 records dirties some 660 pages:
    more than SQLite's own 2 MiB cache holds, so with it some are spilled into the WAL
    before the commit and written again (690 writes); with the store's cache, once."""
    db = tmp_path / "b.db"
    with (
        walcount.counting() as counter,
        oncebox.open(f"sqlite:///{db}?vfs={counter.vfs_name}", inboxes=[KEYED]) as box,
    ):
        for start in range(0, 45_000, 1000):
            box.ingest_batch("k", [keyed(i) for i in range(start, start + 1000)])
        assert isinstance(box.store, SQLiteStore)
        box.store._connect().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # an empty WAL
        batch = [keyed(i) for i in range(10**6, 10**6 + 1000)]
        _, counts = counter.measure(lambda: box.ingest_batch("k", batch))
        pages = wal_pages(Path(f"{db}-wal"))  # the last connection's close deletes it
    assert len(pages) == len(set(pages)) > 500  # each page one frame, past a 2 MiB cache
    assert counts.pages == len(pages)  # and each frame written once


def _program(conn: apsw.Connection, sql: str) -> object:
    """What SQLite compiles ``sql`` to (EXPLAIN's rows), or the error it refuses it with."""
    try:
        try:
            return [tuple(row) for row in conn.execute("EXPLAIN " + sql)]
        except apsw.BindingsError as exc:  # EXPLAIN takes the parameters too: all NULL
            wanted = re.search(r"has (\d+) bindings", str(exc))
            assert wanted is not None, exc
            return [tuple(row) for row in conn.execute("EXPLAIN " + sql, (None,) * int(wanted[1]))]
    except apsw.SQLError as exc:  # a migration's DDL, on a store it was applied to already
        return ("refused", str(exc))


def test_each_statement_runs_as_its_full_text_would(tmp_path: Path) -> None:
    """The store runs each statement without comments, blank lines or indentation (APSW
    hashes the text on every run, every row of an executemany); SQLite must compile it to
    the same program, byte for byte, as the text in queries.sql."""
    store = SQLiteStore(str(tmp_path / "e.db"))
    try:
        conn = store._connect()
        compiled = 0
        for name, query in Q.items():
            full, bare = _program(conn, query.sql), _program(conn, _TEXT[name])
            assert full == bare, name
            compiled += isinstance(full, list) and len(full) > 0
        assert compiled > 100
    finally:
        store.close()


def test_the_statements_are_run_without_comments_blank_lines_or_indentation() -> None:
    for name, text in _TEXT.items():
        for line in text.splitlines():
            assert line == line.strip() and line, (name, line)
            assert not line.startswith("--"), (name, line)
    # the batch's two statements run once a row: 301 and 101 bytes with their indentation
    assert len(_TEXT["insert_records"]) < 260
    assert len(_TEXT["append_log"]) <= 101
