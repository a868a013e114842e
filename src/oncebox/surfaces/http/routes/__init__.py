"""The service's routers, one per concern; ``create_app`` includes them all."""

from oncebox.surfaces.http.routes import (
    batches,
    deliveries,
    health,
    leases,
    letters,
    log,
    metrics,
    quarantine,
    triage,
    work,
)

ROUTERS = (
    deliveries.router,
    batches.router,
    leases.router,
    log.router,
    quarantine.router,
    letters.router,
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
    quarantine.TAG,
    triage.TAG,
    work.TAG,
    health.TAG,
    metrics.TAG,
]

__all__ = ["ROUTERS", "TAGS"]
