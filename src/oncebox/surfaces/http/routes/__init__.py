"""The service's routers, one per concern; ``create_app`` includes them all."""

from oncebox.surfaces.http.routes import (
    batches,
    bulk,
    consumers,
    deliveries,
    feed,
    forwarding,
    health,
    leases,
    letters,
    log,
    metrics,
    quarantine,
    records,
    triage,
    work,
)

ROUTERS = (
    deliveries.router,
    batches.router,
    leases.router,
    log.router,
    feed.router,
    consumers.router,
    records.router,
    forwarding.router,
    quarantine.router,
    letters.router,
    bulk.router,
    triage.router,
    work.router,
    health.router,
    metrics.router,
)
TAGS = [
    deliveries.TAG,
    batches.TAG,
    leases.TAG,
    log.TAG,
    feed.TAG,
    consumers.TAG,
    records.TAG,
    forwarding.TAG,
    quarantine.TAG,
    triage.TAG,
    work.TAG,
    health.TAG,
    metrics.TAG,
]

__all__ = ["ROUTERS", "TAGS"]
