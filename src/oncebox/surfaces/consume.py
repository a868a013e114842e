"""Redis Streams transport adapter: a consumer-group reader that acks only what committed.

An entry is one delivery. Its fields, in one of two forms:

- ``body`` (the bytes exactly as received), plus the optional transport facts ``key``
  (the identity key, e.g. a USSD ``frame_id``), ``snapshot_id``, ``device_time``,
  ``delivery_id`` and ``lease_token`` (an integer). ``delivery_id`` defaults to the
  entry id.
- ``line``: one line in the ``oncebox ingest`` NDJSON form of the inbox's codec
  (see :mod:`oncebox.surfaces.lines`).

An entry in neither form (or whose text facts are not UTF-8 or hold a NUL, or whose lease
token is not an integer) cannot be read: it is delivered as ``name=value`` lines of its
raw fields, an :class:`~oncebox.formats.Unreadable` delivery that is dead-lettered
(``bad_format``) whatever the codec, and acked: nothing read is dropped, and nothing
unreadable stays pending to be claimed again for ever. A ``line`` that cannot be read
is a dead letter the same way (see :mod:`oncebox.surfaces.lines`).

**The ack rule.** Entries are decided in batches (one transaction each, through
``ingest_batch``) and ``XACK``-ed exactly when their decision has ``may_ack``: accepted,
duplicate, conflict (quarantined) and invalid (dead-lettered) entries are acked once the
transaction that stored them committed. Everything else stays in the group's pending
list: a fenced entry (``stale_token``, ``expired_lease``: nothing stored, the sender must
publish it again under a new lease), an entry whose apply step failed, and every entry of
a batch the store failed to decide. A consumer that dies between its commit and its
``XACK`` leaves its entries pending too. Pending entries idle for ``claim_idle_ms`` are
taken over with ``XAUTOCLAIM`` (by any consumer of the group, the same one included) and
decided again: what had committed comes back as a duplicate (or the same conflict), so
nothing is applied twice and nothing is lost.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from oncebox.domain import Decision
from oncebox.engine import crashpoints
from oncebox.engine.box import Oncebox
from oncebox.errors import ApplyError, StorageError
from oncebox.formats import Delivery, Unreadable
from oncebox.logtext import escaped
from oncebox.surfaces import letters
from oncebox.surfaces.lines import INT64_MAX, delivery_from_line

if TYPE_CHECKING:
    import redis

log = logging.getLogger("oncebox.consume")

DEFAULT_BLOCK_MS = 5_000
DEFAULT_CLAIM_IDLE_MS = 30_000
FIRST_ID = "0-0"
_TEXT_FACTS = ("key", "snapshot_id", "device_time", "delivery_id")
_TOKEN = re.compile(r"[0-9]{1,19}")

Entry = tuple[str, Mapping[bytes, bytes] | None]


@dataclass
class Summary:
    """What a run of the consumer did, by entry."""

    entries: int = 0
    claimed: int = 0  # taken over from the pending list with XAUTOCLAIM
    acked: int = 0
    left_pending: int = 0  # decided with may_ack false, or not decided (apply step failed)
    failed: int = 0  # an apply step raised; nothing stored for the entry
    deleted: int = 0  # pending, but trimmed from the stream before it could be claimed
    verdicts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, other: Summary) -> None:
        self.entries += other.entries
        self.claimed += other.claimed
        self.acked += other.acked
        self.left_pending += other.left_pending
        self.failed += other.failed
        self.deleted += other.deleted
        self.verdicts.update(other.verdicts)
        self.reasons.update(other.reasons)

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "claimed": self.claimed,
            "verdicts": dict(sorted(self.verdicts.items())),
            "reasons": dict(sorted(self.reasons.items())),
            "acked": self.acked,
            "left_pending": self.left_pending,
            "failed": self.failed,
            "deleted": self.deleted,
        }


def delivery_from_entry(codec: str, entry_id: str, fields: Mapping[bytes, bytes]) -> Delivery:
    """The delivery a stream entry carries (the module docstring gives the forms)."""
    line = fields.get(b"line")
    if line is not None:
        delivery = delivery_from_line(codec, line)
        return replace(delivery, delivery_id=delivery.delivery_id or entry_id)
    body = fields.get(b"body")
    facts = _facts(fields)
    if body is None or facts is None:
        raw = b"\n".join(name + b"=" + value for name, value in sorted(fields.items()))
        if body is None:
            detail = "the entry has neither a body nor a line field"
            return Unreadable(body=raw, delivery_id=entry_id, detail=detail)
        # A fact the store cannot take (a lease token that is no integer, text that is
        # not UTF-8): dead-lettered and acked, not decided again every idle period for
        # ever. On a lease-fenced inbox the fence still comes first, so the scope and
        # token are carried where they can be read: without the current lease the entry
        # stores nothing and stays pending, like any fenced entry.
        detail = "a transport fact is malformed (lease_token an integer, facts UTF-8 text)"
        return Unreadable(
            body=raw,
            delivery_id=entry_id,
            detail=detail,
            reason="bad_envelope",
            **_fence_facts(fields),
        )
    token = facts.get("lease_token")
    return Delivery(
        body=body,
        key=facts.get("key"),
        snapshot_id=facts.get("snapshot_id"),
        device_time=facts.get("device_time"),
        delivery_id=facts.get("delivery_id", entry_id),
        lease_token=int(token) if token is not None else None,
    )


def _facts(fields: Mapping[bytes, bytes]) -> dict[str, str] | None:
    """The transport facts as text, or None when one is not UTF-8 or holds a NUL (which
    PostgreSQL cannot store), or the lease token is not a 64-bit unsigned integer: such
    an entry is malformed as a whole."""
    try:
        facts = {
            name: fields[name.encode()].decode("utf-8")
            for name in (*_TEXT_FACTS, "lease_token")
            if name.encode() in fields
        }
    except UnicodeDecodeError:
        return None
    if any("\x00" in value for value in facts.values()):
        return None
    token = facts.get("lease_token")
    if token is not None and not (_TOKEN.fullmatch(token) and int(token) <= INT64_MAX):
        return None
    return facts


def _fence_facts(fields: Mapping[bytes, bytes]) -> dict[str, Any]:
    """Of a malformed entry's facts, the scope and lease token, where each is readable."""
    found: dict[str, Any] = {}
    for name in ("snapshot_id", "lease_token"):
        single = _facts({name.encode(): fields[name.encode()]} if name.encode() in fields else {})
        if single and name in single:
            found[name] = int(single[name]) if name == "lease_token" else single[name]
    return found


class StreamConsumer:
    """One consumer of a Redis consumer group, deciding entries into one inbox.

    Not thread-safe: run one per thread or process, each with its own consumer name.
    """

    def __init__(
        self,
        box: Oncebox,
        redis_url: str,
        stream: str,
        group: str,
        consumer: str,
        inbox: str,
        *,
        batch: int = 100,
        block_ms: int = DEFAULT_BLOCK_MS,
        claim_idle_ms: int = DEFAULT_CLAIM_IDLE_MS,
    ) -> None:
        if batch < 1:
            raise ValueError("batch must be at least 1")
        self.box = box
        self.codec = box.inbox(inbox).codec.name  # an unknown inbox fails here, early
        import redis  # here, not at the top: it costs every other command ~0.2 s to load

        self.redis: redis.Redis = redis.Redis.from_url(redis_url)
        self._response_error = redis.exceptions.ResponseError
        # Failures after which a later attempt may succeed: nothing of the batch was
        # acked, so its entries stay pending and are claimed again.
        self._retryable: tuple[type[Exception], ...] = (
            StorageError,
            redis.exceptions.ConnectionError,
            redis.exceptions.TimeoutError,
        )
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.inbox = inbox
        self.batch = batch
        self.block_ms = block_ms
        self.claim_idle_ms = claim_idle_ms
        self._group_ready = False
        self._cursor = FIRST_ID  # where the current XAUTOCLAIM pass goes on from
        self._next_claim = 0.0  # monotonic time the next pass may start

    # -- driving ---------------------------------------------------------------------------
    def run_once(self) -> Summary:
        """Drain: one full pass over the pending entries idle for ``claim_idle_ms``,
        then every new entry, without blocking. Returns when there is nothing left."""
        self._ensure_group()
        total = Summary()
        self._cursor = FIRST_ID
        while True:
            total.add(self._decide(self._claim(), claimed=True))
            if self._cursor == FIRST_ID:
                break
        while True:
            fresh = self._read(None)
            if not fresh:
                return total
            total.add(self._decide(fresh))

    def step(self, block_ms: int | None = None) -> Summary:
        """One batch: pending entries to take over when a claim pass is due, else new
        entries (waiting up to ``block_ms`` for them)."""
        self._ensure_group()
        claimed: list[Entry] = []
        if time.monotonic() >= self._next_claim:
            claimed = self._claim()
        if claimed:
            return self._decide(claimed, claimed=True)
        return self._decide(self._read(block_ms))

    def run(self, stop_event: threading.Event) -> Summary:
        """Consume until ``stop_event`` is set (noticed within ``block_ms``).

        A store or Redis failure is logged and retried with a capped backoff: nothing
        of the failed batch was acked, so its entries are claimed again later.
        """
        total = Summary()
        backoff = 0.1
        while not stop_event.is_set():
            try:
                total.add(self.step(self.block_ms))
                backoff = 0.1
            except self._retryable as exc:
                shown = escaped(str(exc))
                log.warning("consume %s: %s; retrying in %.1fs", self.stream, shown, backoff)
                self._group_ready = False
                stop_event.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except self._response_error as exc:
                if "NOGROUP" not in str(exc):
                    raise
                log.warning("consume %s: the group vanished; creating it again", self.stream)
                self._group_ready = False
        return total

    def leave(self) -> bool:
        """Leave the group if this consumer holds no pending entry, so that restarts do
        not pile up names in it; True if it left. (XGROUP DELCONSUMER would drop the
        consumer's pending entries with it, so one that holds any stays.)"""
        mine: Any = self.redis.xpending_range(
            self.stream, self.group, min="-", max="+", count=1, consumername=self.consumer
        )
        if mine:
            return False
        self.redis.xgroup_delconsumer(self.stream, self.group, self.consumer)
        return True

    def pending(self) -> int:
        """How many entries the whole group has read but not acknowledged."""
        info: Any = self.redis.xpending(self.stream, self.group)
        return int(info["pending"])

    def close(self) -> None:
        self.redis.close()

    # -- redis -----------------------------------------------------------------------------
    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            # From the stream's first entry: a group created after entries arrived
            # still decides them (intake must not skip what was already sent).
            self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except self._response_error as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _claim(self) -> list[Entry]:
        reply: Any = self.redis.xautoclaim(
            self.stream,
            self.group,
            self.consumer,
            min_idle_time=self.claim_idle_ms,
            start_id=self._cursor,
            count=self.batch,
        )
        self._cursor = _text(reply[0])
        if self._cursor == FIRST_ID:
            # The pass reached the end. Entries claimed now become idle again only
            # after claim_idle_ms, so there is no point scanning sooner than that.
            self._next_claim = time.monotonic() + max(self.claim_idle_ms / 2000, 0.05)
        return [(_text(entry_id), fields) for entry_id, fields in reply[1] if entry_id]

    def _read(self, block_ms: int | None) -> list[Entry]:
        reply: Any = self.redis.xreadgroup(
            self.group,
            self.consumer,
            {self.stream: ">"},
            count=self.batch,
            block=block_ms if block_ms else None,
        )
        if not reply:
            return []
        if isinstance(reply, dict):  # RESP3
            streams = list(reply.values())
            entries = streams[0] if streams else []
        else:
            entries = reply[0][1]
        return [(_text(entry_id), fields) for entry_id, fields in entries]

    # -- deciding --------------------------------------------------------------------------
    def _decide(self, entries: Sequence[Entry], claimed: bool = False) -> Summary:
        summary = Summary(entries=len(entries), claimed=len(entries) if claimed else 0)
        if not entries:
            return summary
        gone = [entry_id for entry_id, fields in entries if fields is None]
        live = [(entry_id, fields) for entry_id, fields in entries if fields is not None]
        if gone:
            # Trimmed or deleted from the stream while pending: there is nothing left
            # to decide, and Redis 7 drops such ids from the pending list itself.
            log.warning("consume %s: %d pending entries no longer exist", self.stream, len(gone))
            summary.deleted = len(gone)
            self.redis.xack(self.stream, self.group, *gone)
        deliveries = [delivery_from_entry(self.codec, eid, fields) for eid, fields in live]
        # Whoever adds to the stream is a sender: a line re-delivering a dead letter may
        # name it, one correcting it (an operator's replay) is decided as any delivery.
        deliveries = letters.resent_only(self.box, self.inbox, deliveries)
        decisions = self._ingest(deliveries)
        acks: list[str] = []
        for (entry_id, _), decision in zip(live, decisions, strict=True):
            if decision is None:
                summary.failed += 1
                summary.left_pending += 1
                continue
            summary.verdicts[str(decision.verdict)] += 1
            if decision.reason:
                summary.reasons[f"{decision.verdict}:{decision.reason}"] += 1
            if decision.may_ack:
                acks.append(entry_id)
            else:
                summary.left_pending += 1
                log.warning(
                    "consume %s: entry %s %s (%s): left pending, not acked",
                    self.stream,
                    entry_id,
                    decision.verdict,
                    decision.reason,
                )
        # The decisions have committed; a crash from here to the XACK leaves the entries
        # pending, and whoever claims them gets duplicates: nothing applies twice.
        crashpoints.reach(crashpoints.BEFORE_XACK)
        if acks:
            self.redis.xack(self.stream, self.group, *acks)
        summary.acked = len(acks)
        return summary

    def _ingest(self, deliveries: list[Delivery]) -> list[Decision | None]:
        """Decide the batch; an entry whose apply step fails stays undecided (None) and
        pending, the others are decided. A storage error raises: nothing acked."""
        decisions: list[Decision | None] = []
        for outcome in self.box.ingest_each(self.inbox, deliveries):
            if isinstance(outcome, ApplyError):
                shown = escaped(str(outcome))  # it quotes the step's error, and that the data
                log.error("consume %s: apply step failed; left pending: %s", self.stream, shown)
                decisions.append(None)
            else:
                decisions.append(outcome)
        return decisions


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
