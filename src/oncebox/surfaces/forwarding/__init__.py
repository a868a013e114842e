"""Dispatchers: what sends an inbox's forwards on to its destinations (the outbox's rules
are the engine's, :mod:`oncebox.engine.outbox`)."""

from oncebox.surfaces.forwarding.dispatcher import Dispatcher

__all__ = ["Dispatcher"]
