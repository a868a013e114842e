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
import contextlib
import logging
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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


@dataclass
class Probe:
    base: str
    pid: int
    secret: str

    def client(self, timeout: float = 600.0) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.secret}"}
        return httpx.Client(base_url=self.base, headers=headers, timeout=timeout)

    def quarantine_list(self, limit: int) -> str:
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
        return (
            f"limit={limit}: {answer.status_code}, {rows} rows, {len(answer.content):,} bytes "
            f"({mib(len(answer.content))}) in {took:.1f} s; peak RSS {mib(peak_rss(self.pid))}"
            f" (+{mib(peak_rss(self.pid) - baseline)} over {mib(baseline)})"
        )

    def console_page(self) -> str:
        with httpx.Client(base_url=self.base, timeout=600.0) as http:
            form = http.get("/console/signin").text
            nonce = re.search(r'name="signin" value="([^"]+)"', form)
            assert nonce is not None
            http.post("/console/signin", data={"signin": nonce.group(1), "token": self.secret})
            started = time.monotonic()
            page = http.get("/console/quarantine")
            took = time.monotonic() - started
        cards = page.text.count('class="side newcomer"')
        return (
            f"{page.status_code}, {len(page.content):,} bytes ({mib(len(page.content))}) in "
            f"{took:.2f} s, {cards} newcomers shown"
        )

    def letter_listings(self, at_once: int) -> str:
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
        return (
            f"{at_once} x limit={limit}: {statuses}, largest answer {largest:,} bytes "
            f"({mib(largest)}); peak RSS +{mib(added)} over {mib(baseline)}"
        )

    def search(self, term: str) -> tuple[int, float, str]:
        with self.client() as http:
            started = time.monotonic()
            answer = http.get("/v1/inboxes/listing/dead-letters", params={"search": term})
            return answer.status_code, time.monotonic() - started, answer.headers.get(
                "retry-after", ""
            )

    def one_search(self) -> str:
        lines = []
        for length in (1024, 256):
            status, took, _ = self.search(SEARCH_MISS[-length:])
            lines.append(f"{length}-char term: {status} in {took:.2f} s")
        return "; ".join(lines)

    def searches_at_once(self, count: int, length: int) -> str:
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
        return (
            f"{count} searches ({len(term)}-char term) at once: {by_status}, all answered in "
            f"{ended - began:.1f} s; honest deliveries meanwhile: {decided} decided, longest "
            f"wait {slowest:.2f} s"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conflicts", type=int, default=300)
    parser.add_argument("--size", type=int, default=1_048_576)
    parser.add_argument("--letters", type=int, default=1500)
    parser.add_argument("--listings", type=int, default=4)
    parser.add_argument("--searches", type=int, default=48)
    parser.add_argument("--term", type=int, default=1024, help="the searches' term length")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="oncebox-biglists-") as work:
        url = f"sqlite:///{Path(work) / 'served.db'}"
        config = Path(work) / "oncebox.toml"
        config.write_text(CONFIG)
        started = time.monotonic()
        secret = fill(url, str(config), args.conflicts, args.size, args.letters)
        print(
            f"store: {args.conflicts} conflicts of {args.size:,} bytes, {args.letters} dead "
            f"letters of {HEAD:,} bytes (filled in {time.monotonic() - started:.0f} s)",
            flush=True,
        )
        env = {"ONCEBOX_CONFIG": str(config)}
        with (
            open(os.devnull, "wb") as quiet,  # the access log
            serving(url, "--workers", "1", env=env, started=120.0, stderr=quiet) as served,
        ):
            probe = Probe(served.base, served.proc.pid, secret)
            print(f"quarantine list: {probe.quarantine_list(args.conflicts)}", flush=True)
            print(f"console quarantine page: {probe.console_page()}", flush=True)
            print(f"dead-letter listings: {probe.letter_listings(args.listings)}", flush=True)
            print(f"one search: {probe.one_search()}", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                line = probe.searches_at_once(args.searches, args.term)
                print(f"searches at once: {line}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
