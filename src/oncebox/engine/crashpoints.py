"""Named places where a process can die, for the crash tests.

A test starts a child with ``ONCEBOX_CRASH_AT=<point>``; when the child reaches that
point it dies at once with ``os._exit``: no cleanup, no close, no flush, exactly as
a power cut or a ``kill -9`` would leave things. Unset, each point costs one test.
"""

from __future__ import annotations

import os

BEFORE_INSERT = "before_insert"
AFTER_INSERT = "after_insert"  # the record and its effects written, not yet committed
AFTER_COMMIT = "after_commit"  # committed; on PostgreSQL not yet sealed (SQLite seals in it)
AFTER_SEAL = "after_seal"  # sealed, but the caller never sees the decision (ack lost)
BEFORE_XACK = "before_xack"  # redis consumer: batch committed, XACK not sent
POINTS = (BEFORE_INSERT, AFTER_INSERT, AFTER_COMMIT, AFTER_SEAL)
EXIT_CODE = 86

_ARMED = os.environ.get("ONCEBOX_CRASH_AT")
# Whether a point may be armed in this process: an ingest passes four points, and the
# hot paths test this before calling :func:`reach` (the call costs more than the test).
# A harness that replaces ``reach`` sets it too (reliability/crashpoints.py).
ARMED = _ARMED is not None


def reach(point: str) -> None:
    if point == _ARMED:
        os._exit(EXIT_CODE)
