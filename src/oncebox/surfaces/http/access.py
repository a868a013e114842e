"""What every router shares: the service's state, and the path parameters routes name.

The service's state (the box, the group commit, the gate, the keys) is one
:class:`Service` on ``app.state``, which :func:`service` hands to routes: routers are
module-level, and one process may serve several apps. Who may call a route is the gate's
(:mod:`oncebox.surfaces.http.auth`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Path, Request

from oncebox.engine.box import Oncebox
from oncebox.surfaces.http.auth import Gate
from oncebox.surfaces.http.groupcommit import GroupCommit
from oncebox.surfaces.http.metrics import Metrics
from oncebox.surfaces.http.news import News
from oncebox.surfaces.http.reading import Readers
from oncebox.surfaces.lines import INT64_MAX  # ids and tokens: 64-bit in both stores


@dataclass
class Service:
    """What the routes of one app work with."""

    box: Oncebox
    group: GroupCommit
    metrics: Metrics
    gate: Gate
    private_key: bytes | None
    batch_limit: int
    news: News  # what this process sealed, for the feed's waiting readers
    readers: Readers = field(default_factory=Readers)  # listings and searches


def service(request: Request) -> Service:
    found: Service = request.app.state.service
    return found


Served = Annotated[Service, Depends(service)]
InboxName = Annotated[str, Path(description="The inbox's name, as declared.")]
# Published as below 2**63, a bound a double holds exactly (2**63 - 1 reads as 2**63).
RowId = Annotated[int, Path(ge=1, lt=INT64_MAX + 1, description="The row's id.")]
