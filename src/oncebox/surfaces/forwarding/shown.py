"""Forwarding as people and scripts read it, the same in the CLI, the API and the console."""

from __future__ import annotations

from typing import Any

from oncebox.domain.forwarding import Attempt, Forward
from oncebox.engine.forwarding import Standing
from oncebox.surfaces.views import as_json, iso


def standing_json(standing: Standing) -> dict[str, Any]:
    """A destination: its settings (never a secret), state, backlog and success rate."""
    state = standing.state
    rate = standing.success_rate
    return {
        **standing.destination.describe(),
        "inbox": standing.destination.inbox,
        "state": standing.circuit,
        "paused_at": iso(state.paused_at),
        "paused_by": state.paused_by,
        "circuit": state.circuit,
        "failures_in_a_row": state.failures,
        "open_until": iso(state.open_until) if state.circuit != "closed" else None,
        "backlog": standing.backlog,
        "oldest_pending_seconds": round(standing.oldest_seconds, 3),
        "dead": standing.dead,
        "delivered_24h": standing.delivered,
        "failed_24h": standing.failed,
        "success_rate": round(rate, 4) if rate is not None else None,
    }


def forward_json(forward: Forward, attempts: list[Attempt] | None = None) -> dict[str, Any]:
    shown = as_json(forward)
    if attempts is not None:
        shown["attempts_made"] = [as_json(a) for a in attempts]
    return shown
