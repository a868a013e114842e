"""Where the service's listings and searches run, so that no read can hold the write path.

A listing may read many rows, and a search looks through every kept head in its range
(a 1 KiB term over 1,500 heads of 64 KiB took 4.6 s; 48 at once held honest deliveries
up for 108 s: they filled the thread pool that authentication and every other route
share, and the CPUs). So, in each worker process:

- a listing's pages are read (and turned into JSON) in worker threads of their own, at
  most :data:`READERS` at once, never on the event loop nor in the shared thread pool
  (the group commit has its own executor); a page waits its turn, holding no thread;
- at most :data:`SEARCHES` searches run at once; one more is answered 503 with
  ``Retry-After`` at once rather than queued, and each search has a time budget
  (``Reads.dead_letters``);
- the store reads on connections of its own (``Store.scanning``: a pool apart from the
  writers' on PostgreSQL, a WAL reader on SQLite), so no writer waits for one;
- an answer is written a page at a time, never built whole in memory.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from pydantic import BaseModel
from starlette.responses import StreamingResponse

from oncebox.surfaces.http.problems import RETRY_AFTER, ProblemError

READERS = 4  # listing pages read at once, per worker process
SEARCHES = 2  # searches at once, per worker process
T = TypeVar("T")


class Readers:
    """A worker process's readers: its threads for listings, and its search slots."""

    def __init__(self, threads: int = READERS, searches: int = SEARCHES) -> None:
        self.threads = threads
        self.searches = searches
        self.searching = 0
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` in one of the readers' threads."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.threads)
        return await anyio.to_thread.run_sync(work, *args, limiter=self._limiter)

    def take_search(self) -> None:
        """Hold a search slot (give it back with :meth:`give_search`), or refuse: 503."""
        if self.searching >= self.searches:
            raise ProblemError(
                503,
                "busy",
                f"{self.searches} searches are running in this worker already; retry in a "
                "moment, or narrow the listing without a search",
                headers={"Retry-After": RETRY_AFTER},
            )
        self.searching += 1

    def give_search(self) -> None:
        self.searching -= 1

    async def stream(
        self, chunks: Iterator[bytes], media_type: str, search: bool = False, **kw: Any
    ) -> StreamingResponse:
        """An answer written chunk by chunk as the readers make them. The first chunk is
        made before the answer starts, so an error there (an unknown inbox, a search
        past its budget) is still a problem document; a search holds its slot to the
        end. ``kw`` goes to the response (headers)."""
        if search:
            self.take_search()
        try:
            first = await self.run(next, chunks, None)
        except BaseException:
            if search:
                self.give_search()
            raise

        async def body() -> Any:
            try:
                chunk = first
                while chunk is not None:
                    yield chunk
                    chunk = await self.run(next, chunks, None)
            finally:
                if search:
                    self.give_search()

        return StreamingResponse(body(), media_type=media_type, **kw)


M = TypeVar("M", bound=BaseModel)


def encoder(model: type[M]) -> Callable[[dict[str, Any]], str]:
    """A row as its model sends it: checked against the model, which the OpenAPI
    document declares, and in its field order."""

    def encode(row: dict[str, Any]) -> str:
        return model.model_validate(row).model_dump_json()

    return encode


def encoded(chunks: Iterator[str]) -> Iterator[bytes]:
    return (chunk.encode("utf-8") for chunk in chunks)


def joined(lines: Iterator[bytes], size: int) -> Iterator[bytes]:
    """``size`` lines a chunk, so that a thread turn makes a page, not a line (an
    empty download still makes one chunk, so that it begins before it answers)."""
    sent = False
    while chunk := b"".join(itertools.islice(lines, size)):
        sent = True
        yield chunk
    if not sent:
        yield b""
