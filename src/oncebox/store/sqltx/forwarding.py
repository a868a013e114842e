"""The outbox, its attempts and the destinations' shared state, in SQL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from oncebox.domain import FeedEntry
from oncebox.domain.forwarding import (
    Attempt,
    DestinationState,
    Forward,
    ForwardFilter,
    ForwardStatus,
    Outcome,
)
from oncebox.store.sqltx.base import SqlBase, Statement

FAILING = (ForwardStatus.FAILED, ForwardStatus.DEAD)  # the statuses forwards_failing holds


class ForwardingSql(SqlBase):
    def queue_forwards(
        self, rows: Sequence[tuple[int, str, int, int, str | None, float, float, float]]
    ) -> None:
        self._many("forwards_queue", rows)

    def due_forwards(
        self, destination: str, inbox_id: int, now: float, limit: int, ordered: bool
    ) -> list[Forward]:
        params = {"destination": destination, "inbox": inbox_id, "now": now, "limit": limit,
                  "ordered": ordered}  # fmt: skip
        return [_status(row) for row in self._rows("forwards_due", params, Forward)]

    def forward_due(self, destination: str, inbox_id: int, now: float) -> bool:
        return self._one("forward_due", (destination, inbox_id, now)) is not None

    def get_forward(self, forward_id: int, lock: bool = False) -> Forward | None:
        name = "forward_get_for_update" if lock else "forward_get"
        row = self._row(name, (forward_id,), Forward)
        return _status(row) if row is not None else None

    def forward_revision(self, record_id: int, revision: int) -> FeedEntry | None:
        params = {"record": record_id, "revision": revision}
        row = self._row("forward_revision", params, FeedEntry)
        if row is None or row.witness is None:
            return None
        content = bytes(row.content) if row.content is not None else None
        return replace(row, witness=bytes(row.witness), content=content,
                       content_length=len(content) if content is not None else None)  # fmt: skip

    def settle_forwards(self, forwards: Sequence[Forward]) -> None:
        self._many(
            "forward_settle",
            [
                (f.status.value, f.attempts, f.schedule_at, f.next_at, f.updated_at,
                 f.last_status, f.last_error, f.finished_at, f.id)
                for f in forwards
            ],
        )  # fmt: skip

    def add_attempts(self, attempts: Sequence[Attempt]) -> None:
        self._many(
            "forward_attempt_add",
            [
                (a.forward_id, a.number, a.at, a.outcome.value, a.status, a.latency, a.answer,
                 a.error, a.next_at, a.dispatcher)
                for a in attempts
            ],
        )  # fmt: skip

    def attempts(self, forward_id: int, limit: int) -> list[Attempt]:
        return [
            replace(
                a,
                outcome=Outcome(a.outcome),
                answer=bytes(a.answer) if a.answer is not None else None,
            )
            for a in self._rows("forward_attempts", (forward_id, limit), Attempt)
        ]

    def drop_claims(self, claims: Sequence[tuple[int, int]]) -> None:
        self._many("forward_claim_drop", [(inbox, str(forward)) for inbox, forward in claims])

    def destination_state(self, name: str) -> DestinationState | None:
        return self._row("destination_get", (name,), DestinationState)

    def destination_states(self) -> list[DestinationState]:
        return self._rows("destinations_all", (), DestinationState)

    def put_pause(self, state: DestinationState) -> None:
        self._run("destination_pause", (state.inbox_id, state.name, state.paused_at,
                                        state.paused_by))  # fmt: skip

    def put_circuit(self, state: DestinationState, before: DestinationState | None) -> bool:
        if before is None:
            written = (state.inbox_id, state.name, state.circuit, state.failures,
                       state.open_until)  # fmt: skip
            return bool(self._run("destination_circuit_new", written))
        return bool(self._run("destination_circuit_swap", {
            "inbox": state.inbox_id, "name": state.name, "circuit": state.circuit,
            "failures": state.failures, "open_until": state.open_until,
            "was_circuit": before.circuit, "was_failures": before.failures,
            "was_open_until": before.open_until,
        }))  # fmt: skip

    def count_forward_outcomes(
        self, destination: str, hour: int, counts: Mapping[str, int]
    ) -> None:
        self._many("forward_count", [(destination, hour, k, n) for k, n in sorted(counts.items())])

    def forward_outcomes(self, destination: str, since_hour: int) -> dict[str, int]:
        return {
            str(k): int(n) for k, n in self._all("forward_counts_since", (destination, since_hour))
        }

    def forward_backlog(self, destination: str, inbox_id: int) -> tuple[int, float | None, int]:
        count, oldest = self._one("forward_backlog", (destination, inbox_id))
        dead = self._one("forward_dead_count", (destination, inbox_id))[0]
        return int(count), oldest, int(dead)

    def list_forwards(
        self, filters: ForwardFilter, after: int, limit: int, inbox_id: int | None = None
    ) -> list[Forward]:
        params = {
            "destination": filters.destination,
            "inbox": inbox_id,
            "status": filters.status.value if filters.status else None,
            "since": filters.since,
            "until": filters.until,
            "record": filters.record_id,
            "after": after,
            "limit": limit,
        }
        name: Statement = "forwards_listed"  # walks the table in id order
        if filters.record_id is not None:
            name = "forwards_of_record"
        elif filters.destination is not None and filters.status in FAILING:
            name = "forwards_failing_listed"
        return [_status(row) for row in self._rows(name, params, Forward)]


def _status(row: Forward) -> Forward:
    return replace(row, status=ForwardStatus(row.status))
