"""Control request bodies (leases, resolutions, work keys) under the strict JSON rules.

FastAPI reads JSON bodies with the standard parser, which keeps the last of duplicate
members, accepts NaN and fails on integers past Python's conversion limit with a 400.
Deliveries already go through the codecs; this route class holds every other JSON body
to the same reader, so ``{"scope": "S", "scope": "T"}`` is refused with 422 instead of
silently leasing ``T``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from oncebox.formats.invalid import Invalid
from oncebox.formats.strictjson import loads as strict_loads

CONTROL_MAX_DEPTH = 20


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            # FastAPI turns a JSONDecodeError into a 422 validation problem.
            try:
                strict_loads(body, max_depth=CONTROL_MAX_DEPTH)
                self._json = json.loads(body)
            except Invalid as exc:
                raise json.JSONDecodeError(f"{exc.reason}: {exc.detail}", "", 0) from None
            except ValueError as exc:  # an integer past Python's conversion limit
                raise json.JSONDecodeError(str(exc), "", 0) from None
        return self._json


class StrictJSONRoute(APIRoute):
    """Routes whose JSON bodies are read by :class:`StrictJSONRequest`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
