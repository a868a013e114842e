"""The service's OpenAPI document, built once per test process.

FastAPI takes seconds of CPU to build it, and it depends on no store or inbox (the
paths name inboxes as parameters), so the tests that only read it share one build.
Each caller gets its own deep copy: no test can change what another reads.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import oncebox
from oncebox.surfaces.http import create_app


@functools.cache
def _built() -> dict[str, Any]:
    box = oncebox.open("sqlite:///:memory:")
    try:
        return create_app(box).openapi()
    finally:
        box.close()


def openapi_document() -> dict[str, Any]:
    """A fresh copy of ``create_app(box).openapi()``, whatever the box."""
    return copy.deepcopy(_built())
