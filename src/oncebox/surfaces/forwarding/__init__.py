"""Dispatchers: what sends an inbox's forwards on to its destinations (the outbox's rules
are the engine's, :mod:`oncebox.engine.outbox`). :class:`.dispatcher.Dispatcher` is
imported from its module, so that a command that only reads never loads the HTTP client."""
