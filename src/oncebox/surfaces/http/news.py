"""What this process sealed, told to the event loop: the feed's readers wait on it (or
on a poll's time, for what other processes sealed) instead of holding a thread each."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool

from oncebox.engine.box import Oncebox
from oncebox.engine.feed import FeedPage
from oncebox.engine.following import POLL
from oncebox.surfaces.http.auth import unauthorized

REVOKED_MEANWHILE = "this token was revoked or expired while the request waited"


class News:
    """Set whenever the box seals something; awaited with a timeout."""

    def __init__(self, box: Oncebox) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        box.listen(self._poke)

    def _poke(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._event.set)

    async def wait(self, seconds: float) -> None:
        self._loop = asyncio.get_running_loop()
        self._event.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), seconds)


async def following(
    read: Callable[[int], FeedPage],
    news: News,
    after: int,
    wait: float,
    live: Callable[[], bool] | None = None,
) -> FeedPage:
    """``read(after)`` again as news comes (looking on from what was looked at), until
    it finds entries or ``wait`` seconds have passed; no thread waits meanwhile. With
    ``live``, entries found after a wait are handed over only while the caller's token
    is still live: a long poll outlasts the check that admitted it."""
    deadline = time.monotonic() + wait
    waited = False
    while True:
        page = await run_in_threadpool(read, after)
        left = deadline - time.monotonic()
        if page.entries or left <= 0:
            if waited and page.entries and live is not None and not await run_in_threadpool(live):
                raise unauthorized(REVOKED_MEANWHILE)
            return page
        after = page.next_after
        await news.wait(min(left, POLL))
        waited = True
