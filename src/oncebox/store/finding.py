"""What the read side asks of a transaction to find records: by when they were first
seen, by identity, by the key their delivery came with, and what is kept around one
(its quarantined newcomers, dead letters under the same key, the log entries about it).

A port of its own beside those of :mod:`oncebox.store.ports`, for
:mod:`oncebox.engine.finding`. Every read is on an index (tests/test_query_plans.py): a
key is found where it is the identity by the identity's own index, elsewhere by the
key's (migration 19).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from oncebox.domain import DeadLetter, LogEntry, Preview, Quarantined, Record, RecordWindow

KEY_INDEXED = 256  # the characters of a key its index holds (the whole key is compared)


class Finding(Protocol):
    def record_page(
        self, inbox_id: int, window: RecordWindow, limit: int, search: bytes | None
    ) -> list[int]:
        """The ids of at most ``limit`` of the inbox's records in ``window``, in its
        order; with ``search``, only those whose content holds those bytes."""
        ...

    def record_start(self, record_id: int) -> tuple[int, float] | None:
        """A record's inbox id and when it was first seen (a page's place), if it is there."""
        ...

    def records_keyed(
        self, inbox_id: int, key: str, ident: bytes, limit: int
    ) -> list[tuple[int, bytes, float]]:
        """(id, identity digest, first seen) of at most ``limit`` records, in id order,
        whose delivery key is ``key``, or whose key is unknown and whose identity digest
        is ``ident`` (the key's)."""
        ...

    def records_identified(self, inbox_id: int, ident: bytes) -> list[tuple[int, bytes, float]]:
        """The same for the record of this identity digest, if there is one."""
        ...

    def records_listed(
        self, ids: Sequence[int], preview: Preview, search: bytes | None
    ) -> list[Record]:
        """These records (in no order), each value read cut to ``preview``; with
        ``search``, only those whose whole content holds those bytes."""
        ...

    def quarantine_of(
        self, inbox_id: int, ident: bytes, limit: int, preview: Preview
    ) -> list[Quarantined]:
        """The newcomers quarantined under an identity, in id order, read cut."""
        ...

    def quarantine_keyed(
        self, inbox_id: int, key: str, ident: bytes, limit: int, preview: Preview
    ) -> list[Quarantined]:
        """The newcomers whose delivery key is ``key`` (or unknown, under the identity
        digest ``ident``, the key's), in id order, read cut."""
        ...

    def dead_letters_keyed(
        self, inbox_id: int, key: str, limit: int, preview: Preview
    ) -> list[DeadLetter]:
        """The dead letters that came with this key, in id order, read cut."""
        ...

    def log_about(
        self, quarantine_ids: Sequence[int], record_ids: Sequence[int], limit: int
    ) -> list[LogEntry]:
        """At most ``limit`` log entries, in order, about these quarantine rows (their
        quarantine, their resolution) or these records (their eviction, the replay
        they came from)."""
        ...
