"""The oncebox HTTP service: ``create_app(box)`` gives an ASGI app (FastAPI)."""

from oncebox.surfaces.http.app import create_app

__all__ = ["create_app"]
