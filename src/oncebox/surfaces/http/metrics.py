"""Prometheus metrics: store figures read at scrape time, plus request latency.

The delivery, quarantine, dead-letter and work-key figures come from the store, so they
count every process writing to it and survive restarts. Only request latency, the
group-commit figures and the webhook refusals (which store nothing) are this process's own.

Who sees what is the scraping caller's (:class:`~oncebox.surfaces.http.auth.Caller`): the
per-inbox series only for the inboxes its token covers; the series without an inbox label
(seal lag, group commit, latency by route, the console's routes included) sum up every
inbox's traffic, so only a token for every inbox sees them.
A scrape that asks for OpenMetrics (``Accept: application/openmetrics-text``) gets it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from oncebox.engine.box import Oncebox
from oncebox.surfaces.forwarding.dispatcher import REGISTRY as FORWARDED
from oncebox.surfaces.http.auth import Caller
from oncebox.surfaces.http.groupcommit import GroupCommit


class ForwardLatency(Collector):
    """This process's dispatchers' latency (``oncebox serve`` runs one in each worker)."""

    def collect(self) -> Iterator[Metric]:
        yield from FORWARDED.collect()


LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class StoreCollector(Collector):
    """Figures of the inboxes the scraping token may read (``visible``), and the
    process-wide ones when it may read every inbox (``everything``)."""

    def __init__(
        self,
        box: Oncebox,
        group: GroupCommit,
        visible: Callable[[str], bool],
        everything: bool,
        refusals: Counter[tuple[str, str]] | None = None,
    ) -> None:
        self.box = box
        self.group = group
        self.refusals = refusals or Counter()
        self.visible = visible
        self.everything = everything

    def collect(self) -> Iterator[Metric]:
        deliveries = CounterMetricFamily(
            "oncebox_deliveries",
            "Deliveries decided, by inbox and verdict.",
            labels=["inbox", "verdict"],
        )
        quarantine = GaugeMetricFamily(
            "oncebox_quarantine_open",
            "Open quarantine rows (conflicts awaiting an operator).",
            labels=["inbox"],
        )
        rejected = CounterMetricFamily(
            "oncebox_rejected",
            "Deliveries rejected, by inbox and reason (too_large: over the inbox's bound).",
            labels=["inbox", "reason"],
        )
        dead = GaugeMetricFamily(
            "oncebox_dead_letters", "Dead letters kept (invalid deliveries).", labels=["inbox"]
        )
        letters = GaugeMetricFamily(
            "oncebox_dead_letters_by_reason",
            "Dead letters kept, by inbox, reason and status (open, replayed, archived).",
            labels=["inbox", "reason", "status"],
        )
        dirty = GaugeMetricFamily(
            "oncebox_dirty_work_keys",
            "Work keys whose generation is not applied yet.",
            labels=["inbox"],
        )
        review = GaugeMetricFamily(
            "oncebox_work_keys_in_review", "Work keys waiting for an operator.", labels=["inbox"]
        )
        for active in self.box.inboxes:
            if not self.visible(active.name):
                continue
            stats = self.box.stats(active.name)
            for verdict, n in sorted(stats["verdicts"].items()):
                deliveries.add_metric([active.name, verdict], n)
            for kind, n in sorted(stats["reasons"].items()):
                verdict, _, reason = kind.partition(":")
                if verdict == "rejected":
                    rejected.add_metric([active.name, reason], n)
            quarantine.add_metric([active.name], stats["quarantine_open"])
            dead.add_metric([active.name], stats["dead_letters"])
            for (status, reason), n in self.box.dead_letter_counts(active.name).items():
                letters.add_metric([active.name, reason, status], n)
            work = self.box.work_figures(active.name)
            dirty.add_metric([active.name], work["dirty"])
            review.add_metric([active.name], work["in_review"])
        refused = CounterMetricFamily(
            "oncebox_webhook_refusals",
            "Webhook requests refused, by inbox and reason: their signature, or (503) "
            "over_budget and in_flight (this process; a refusal stores nothing, so the "
            "store cannot count it).",
            labels=["inbox", "reason"],
        )
        for (inbox, reason), n in sorted(self.refusals.items()):
            if self.visible(inbox):
                refused.add_metric([inbox, reason], n)
        lag = GaugeMetricFamily(
            "oncebox_consumer_lag_entries",
            "Feed entries after a consumer's cursor (counted up to a million positions on).",
            labels=["consumer", "inbox"],
        )
        behind = GaugeMetricFamily(
            "oncebox_consumer_lag_seconds",
            "Seconds since the oldest entry after a consumer's cursor was decided (0: none).",
            labels=["consumer", "inbox"],
        )
        for standing in self.box.consumers():
            if self.visible(standing.inbox):
                named = [standing.consumer.name, standing.inbox]
                lag.add_metric(named, standing.lag_entries)
                behind.add_metric(named, standing.lag_seconds)
        yield from (deliveries, rejected, quarantine, dead, letters, dirty, review, refused)
        yield from (lag, behind)
        yield from self.forwarding()
        if not self.everything:
            return
        yield GaugeMetricFamily(
            "oncebox_seal_lag",
            "Log events committed and not sealed yet.",
            value=self.box.seal_lag(),
        )
        yield CounterMetricFamily(
            "oncebox_group_commit_transactions",
            "Transactions the group committer ran (this process).",
            value=self.group.transactions,
        )
        yield CounterMetricFamily(
            "oncebox_group_commit_deliveries",
            "Single deliveries decided through the group committer (this process).",
            value=self.group.deliveries,
        )


    def forwarding(self) -> Iterator[Metric]:
        """Each destination's backlog and oldest forward's age, and its attempts by
        outcome, from the store (every dispatcher's), for the inboxes the caller sees."""
        backlog = GaugeMetricFamily(
            "oncebox_forward_backlog",
            "Forwards pending or retrying, by inbox and destination.",
            labels=["inbox", "destination"],
        )
        oldest = GaugeMetricFamily(
            "oncebox_forward_oldest_seconds",
            "Seconds the oldest forward pending or retrying has waited (0: none).",
            labels=["inbox", "destination"],
        )
        dead = GaugeMetricFamily(
            "oncebox_forward_dead",
            "Forwards given up (outbound dead letters), by inbox and destination.",
            labels=["inbox", "destination"],
        )
        attempts = CounterMetricFamily(
            "oncebox_forward_attempts",
            "Attempts at forwards, by destination and outcome (delivered, retry, dead, "
            "stale).",
            labels=["destination", "outcome"],
        )
        for standing in self.box.forwarding():
            dest = standing.destination
            if not self.visible(dest.inbox):
                continue
            backlog.add_metric([dest.inbox, dest.name], standing.backlog)
            oldest.add_metric([dest.inbox, dest.name], standing.oldest_seconds)
            dead.add_metric([dest.inbox, dest.name], standing.dead)
            for outcome, n in sorted(self.box.attempt_counts(dest.name).items()):
                attempts.add_metric([dest.name, outcome], n)
        yield from (backlog, oldest, dead, attempts)


class Metrics:
    def __init__(self, box: Oncebox, group: GroupCommit) -> None:
        self.box = box
        self.group = group
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "oncebox_http_request_duration_seconds",
            "HTTP request latency, by method, route and status.",
            ["method", "route", "status"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.refusals: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def refused(self, inbox: str, reason: str) -> None:
        """Count a webhook request refused for its signature (any thread)."""
        with self._lock:
            self.refusals[(inbox, reason)] += 1

    def render(self, who: Caller, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition (and its content type) in the format ``accept`` asks for: store
        figures only for the inboxes ``who`` sees, the process-wide series only if it
        sees them all (:attr:`Caller.sees_all`)."""
        scrape = CollectorRegistry(auto_describe=False)
        with self._lock:
            refusals = self.refusals.copy()
        everything = who.sees_all
        scrape.register(StoreCollector(self.box, self.group, who.sees, everything, refusals))
        if everything:
            scrape.register(self.latency)
            scrape.register(ForwardLatency())
        encode, content_type = choose_encoder(accept or "")
        return encode(scrape), content_type
