"""What big stored contents and slow searches cost a real ``oncebox serve`` (issue 19,
item 3).

Fills a fresh SQLite store through the library (the setup is not what is measured):
``--conflicts`` quarantined newcomers of ``--size`` bytes in a ``keyed`` inbox (each
beside an original of the same size), and ``--letters`` dead letters with 64 KiB kept
heads in ``listing``. Then starts ``oncebox serve --workers 1`` on it and prints one line
per probe (the figures of RELIABILITY.md's Security section):

- **quarantine list**: ``GET /v1/inboxes/blobs/quarantine?limit=N`` (the conflicts, or
  the route's maximum if lower): the answer's size, and the server's peak RSS over its
  baseline (VmHWM, reset first).
- **console page**: ``/console/quarantine`` for a signed-in operator: its size and time.
- **dead-letter listings**: four ``limit=10000`` listings at once (the maximum, if the
  route refuses 10000): the answers' sizes and the peak RSS they added.
- **one search**: a 1 KiB term that matches nothing and costs the most (``a`` * 1023 and
  a ``b``, over heads of ``a``), then the longest term the route takes: status, time.
- **searches at once**: ``--searches`` such searches at once while one honest client
  keeps delivering: how the searches were answered, and the longest an honest delivery
  waited while they ran (it must stay short).

    .venv/bin/python reliability/biglists.py                     # the issue's volume
    .venv/bin/python reliability/biglists.py --conflicts 30 --letters 300 --searches 12
"""

from __future__ import annotations

import argparse
import concurrent.futures
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import oncebox  # noqa: E402
from oncebox import Delivery  # noqa: E402
from serveproc import rss_bytes, serving  # noqa: E402

CONFIG = '[inboxes.blobs]\ncodec = "keyed"\n\n[inboxes.listing]\ncodec = "json-event"\n'
HEAD = 65_536  # what a dead letter keeps
SEARCH_MISS = "a" * 1023 + "b"  # over heads of "a": the most work a 1 KiB term makes


def peak_reset(pid: int) -> None:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux)."""
    with open(f"/proc/{pid}/clear_refs", "w") as refs:
        refs.write("5")


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def mib(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


def fill(url: str, config: str, conflicts: int, size: int, letters: int) -> str:
    """The store: conflicts and dead letters; returns an operator token's secret."""
    logging.getLogger("oncebox").setLevel(logging.ERROR)  # no warning per conflict
    box = oncebox.open(url, config=config)
    try:
        for start in range(0, conflicts, 20):
            keys = [f"k{i:05d}" for i in range(start, min(start + 20, conflicts))]
            box.ingest_batch("blobs", [Delivery(b"o" * size, key=k) for k in keys])
            box.ingest_batch("blobs", [Delivery(b"n" * size, key=k) for k in keys])
        for start in range(0, letters, 100):
            n = min(100, letters - start)
            box.ingest_batch("listing", [Delivery(b"a" * HEAD) for _ in range(n)])
        return box.create_token("probe", ["*"], ["operator", "write"]).secret
    finally:
        box.close()


class Figures(dict[str, Any]):
    """A probe's figures by name, and its line for people."""

    def __init__(self, line: str, **figures: Any) -> None:
        super().__init__(figures)
        self.line = line


def _chunked(answer: httpx.Response) -> bool:
    """Whether the answer was written as it was made (chunked, no length up front)."""
    return answer.headers.get("transfer-encoding") == "chunked"


@dataclass
class Probe:
    base: str
    pid: int
    secret: str

    def client(self, timeout: float = 600.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.secret}"}
        return httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def quarantine_list(self, limit: int) -> Figures:
        with self.client() as http:
            asked = f"/v1/inboxes/blobs/quarantine?limit={limit}&status=accepted"
            if http.get(asked).status_code == 422:
                limit = 1000  # this server's maximum
            baseline = rss_bytes(self.pid)
            peak_reset(self.pid)
            started = time.monotonic()
            answer = http.get(f"/v1/inboxes/blobs/quarantine?limit={limit}")
            took = time.monotonic() - started
            rows = len(answer.json()) if answer.status_code == 200 else 0
        size, peak = len(answer.content), peak_rss(self.pid)
        line = (
            f"limit={limit}: {answer.status_code}, {rows} rows, {size:,} bytes ({mib(size)}) "
            f"in {took:.1f} s; peak RSS {mib(peak)} (+{mib(peak - baseline)} over "
            f"{mib(baseline)})"
        )
        return Figures(line, status=answer.status_code, rows=rows, size=size,
                       added=peak - baseline, chunked=_chunked(answer))  # fmt: skip

    def console_page(self) -> Figures:
        with httpx.Client(base_url=self.base, timeout=600.0) as http:
            form = http.get("/console/signin").text
            nonce = re.search(r'name="signin" value="([^"]+)"', form)
            assert nonce is not None
            http.post("/console/signin", data={"signin": nonce.group(1), "token": self.secret})
            started = time.monotonic()
            page = http.get("/console/quarantine")
            took = time.monotonic() - started
        cards = page.text.count('class="side newcomer"')
        line = (
            f"{page.status_code}, {len(page.content):,} bytes ({mib(len(page.content))}) in "
            f"{took:.2f} s, {cards} newcomers shown"
        )
        return Figures(line, status=page.status_code, size=len(page.content), rows=cards)

    def letter_listings(self, at_once: int) -> Figures:
        with self.client() as http:
            limit = 10_000
            asked = f"/v1/inboxes/listing/dead-letters?limit={limit}&reason=none"
            if http.get(asked).status_code == 422:
                limit = 1000  # this server's maximum
        baseline = rss_bytes(self.pid)
        peak_reset(self.pid)

        def one(_: int) -> tuple[int, int]:
            with self.client() as http:
                answer = http.get(f"/v1/inboxes/listing/dead-letters?limit={limit}")
                return answer.status_code, len(answer.content)

        with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
            answers = list(pool.map(one, range(at_once)))
        statuses = sorted({status for status, _ in answers})
        largest = max(size for _, size in answers)
        added = peak_rss(self.pid) - baseline
        line = (
            f"{at_once} x limit={limit}: {statuses}, largest answer {largest:,} bytes "
            f"({mib(largest)}); peak RSS +{mib(added)} over {mib(baseline)}"
        )
        return Figures(line, statuses=statuses, size=largest, added=added)

    def search(self, term: str) -> tuple[int, float, str]:
        with self.client() as http:
            started = time.monotonic()
            answer = http.get("/v1/inboxes/listing/dead-letters", params={"search": term})
            return answer.status_code, time.monotonic() - started, answer.headers.get(
                "retry-after", ""
            )

    def one_search(self) -> Figures:
        lines, statuses = [], {}
        for length in (1024, 256):
            status, took, _ = self.search(SEARCH_MISS[-length:])
            lines.append(f"{length}-char term: {status} in {took:.2f} s")
            statuses[length] = status
        return Figures("; ".join(lines), statuses=statuses)

    def searches_at_once(self, count: int, length: int) -> Figures:
        """``count`` searches at once while an honest client delivers one at a time."""
        term = SEARCH_MISS[-length:]
        status, _, _ = self.search(term)
        if status == 422:  # this server takes no term this long: its longest, then
            term = SEARCH_MISS[-256:]
        stop = threading.Event()
        waits: list[tuple[float, float, int]] = []  # (started, took, status)

        def honest() -> None:
            with self.client(timeout=600.0) as http:
                i = 0
                while not stop.is_set():
                    i += 1
                    started = time.monotonic()
                    answer = http.post(
                        "/v1/inboxes/blobs/deliveries",
                        content=b"honest",
                        headers={"Oncebox-Key": f"honest-{time.time_ns()}-{i}"},
                    )
                    waits.append((started, time.monotonic() - started, answer.status_code))

        deliverer = threading.Thread(target=honest)
        deliverer.start()
        time.sleep(1.0)
        began = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(count) as pool:
            answers = list(pool.map(lambda _: self.search(term), range(count)))
        ended = time.monotonic()
        stop.set()
        deliverer.join()
        during = [(took, status) for started, took, status in waits if began <= started < ended]
        overlapping = [
            took for started, took, _ in waits if started < ended and started + took > began
        ]
        by_status: dict[str, int] = {}
        for status, _, retry in answers:
            name = f"{status}" + (f" (Retry-After {retry})" if retry else "")
            by_status[name] = by_status.get(name, 0) + 1
        slowest = max(overlapping, default=0.0)
        decided = sum(1 for _, status in during if status in (200, 201))
        line = (
            f"{count} searches ({len(term)}-char term) at once: {by_status}, all answered in "
            f"{ended - began:.1f} s; honest deliveries meanwhile: {decided} decided, longest "
            f"wait {slowest:.2f} s"
        )
        honest_statuses = sorted({status for _, _, status in waits})
        return Figures(line, answers=by_status, honest=honest_statuses)


def run(work: Path, args: argparse.Namespace) -> Iterator[tuple[str, Figures]]:
    """Fill a store in ``work``, serve it, and give each probe's name and figures."""
    url = f"sqlite:///{work / 'served.db'}"
    config = work / "oncebox.toml"
    config.write_text(CONFIG)
    started = time.monotonic()
    secret = fill(url, str(config), args.conflicts, args.size, args.letters)
    yield "store", Figures(
        f"{args.conflicts} conflicts of {args.size:,} bytes, {args.letters} dead letters of "
        f"{HEAD:,} bytes (filled in {time.monotonic() - started:.0f} s)"
    )
    env = {"ONCEBOX_CONFIG": str(config)}
    with (
        open(os.devnull, "wb") as quiet,  # the access log
        serving(url, "--workers", "1", env=env, started=120.0, stderr=quiet) as served,
    ):
        probe = Probe(served.base, served.proc.pid, secret)
        yield "quarantine list", probe.quarantine_list(args.conflicts)
        yield "console quarantine page", probe.console_page()
        yield "dead-letter listings", probe.letter_listings(args.listings)
        yield "one search", probe.one_search()
        yield "searches at once", probe.searches_at_once(args.searches, args.term)


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    found.add_argument("--conflicts", type=int, default=300)
    found.add_argument("--size", type=int, default=1_048_576)
    found.add_argument("--letters", type=int, default=1500)
    found.add_argument("--listings", type=int, default=4)
    found.add_argument("--searches", type=int, default=48)
    found.add_argument("--term", type=int, default=1024, help="the searches' term length")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oncebox-biglists-") as work:
        for name, figures in run(Path(work), args):
            print(f"{name}: {figures.line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
