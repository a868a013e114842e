"""Issue 19, item 4: a redirect's ``Location`` and what ``/readyz`` costs, through a real
``oncebox serve``.

Trailing-slash redirects built an absolute ``Location`` from the request's ``Host``
header (Starlette's ``redirect_slashes``), so anyone could have oncebox send a client to
a host of their choosing; they now name the path alone. ``/readyz`` wrote to the store on
every request, unauthenticated: a flood of probes was a flood of writes (2.6 times what
``/healthz`` costs). Each worker now answers from the last probe for one second, so a
flood costs at most one store write a second per worker, and a failing store is still
seen within about a second.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from oncebox.errors import StorageUnavailable
from oncebox.surfaces.http.routes.health import Readiness
from serveproc import Served, closed_within, serving, status_of


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'served.db'}"


def _get(served: Served, target: str, *headers: str) -> bytes:
    lines = [f"GET {target} HTTP/1.1", *headers, "Connection: close", "", ""]
    with served.connect() as sock:
        sock.sendall("\r\n".join(lines).encode())
        return closed_within(sock, 5)[1]


def _location(answer: bytes) -> str | None:
    head = answer.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
    found = [v.strip() for k, v in (x.split(":", 1) for x in head) if k.lower() == "location"]
    return found[0] if found else None


# -- redirects ----------------------------------------------------------------------------------
REDIRECTS = {
    "/healthz/": "/healthz",
    "/healthz//": "/healthz",
    "/console/": "/console",
    "/console/triage/?table=ranking&x=%22": "/console/triage?table=ranking&x=%22",
    "/v1/inboxes/caf%C3%A9/triage/": "/v1/inboxes/caf%C3%A9/triage",
    "/v1/inboxes/a%20b/triage/": "/v1/inboxes/a%20b/triage",
}


@pytest.mark.slow
@pytest.mark.parametrize("trusted", [False, True])
def test_a_trailing_slash_redirect_names_no_host(tmp_path: Path, trusted: bool) -> None:
    args = ("--forwarded-allow-ips", "127.0.0.1") if trusted else ()
    with serving(_url(tmp_path), "--workers", "1", *args) as served:
        for target, location in REDIRECTS.items():
            for host in ("evil.example", "127.0.0.1:1"):
                answer = _get(served, target, f"Host: {host}", "X-Forwarded-Proto: https")
                assert status_of(answer) == 307, (target, answer[:300])
                assert _location(answer) == location, (target, answer[:300])
        # A path whose other spelling matches no route is not redirected anywhere.
        for target in ("//evil.example/healthz/", "/%2Fevil.example/healthz/", "/nowhere/"):
            answer = _get(served, target, "Host: evil.example")
            assert status_of(answer) == 404 and _location(answer) is None, answer[:300]
        # And the redirect is followed to the right place.
        with httpx.Client(base_url=served.base, headers={"Host": "evil.example"}) as http:
            assert http.get("/healthz/", follow_redirects=True).json() == {"status": "ok"}


# -- /readyz under a flood ------------------------------------------------------------------------
PROBES = 400
CLIENTS = 4


def _count_probe_writes(db: Path) -> None:
    """A trigger in the served store counts every readiness write (the probe row's
    insert or update), so the test counts writes, not time."""
    with sqlite3.connect(db) as conn:
        conn.executescript(
            """
            CREATE TABLE probe_writes (n INTEGER NOT NULL);
            INSERT INTO probe_writes VALUES (0);
            CREATE TRIGGER probe_inserted AFTER INSERT ON meta WHEN NEW.key = 'ready_probe'
            BEGIN UPDATE probe_writes SET n = n + 1; END;
            CREATE TRIGGER probe_updated AFTER UPDATE ON meta WHEN NEW.key = 'ready_probe'
            BEGIN UPDATE probe_writes SET n = n + 1; END;
            """
        )


def _probe_writes(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT n FROM probe_writes").fetchone()[0])


@pytest.mark.slow
def test_a_flood_of_readyz_costs_one_write_a_second(tmp_path: Path) -> None:
    db = tmp_path / "served.db"
    with serving(_url(tmp_path), "--workers", "1"):
        pass  # the schema, made by the server as it always is
    _count_probe_writes(db)
    with serving(_url(tmp_path), "--workers", "1") as served:
        statuses: list[int] = []
        lock = threading.Lock()

        def flood(_: int) -> None:
            with httpx.Client(base_url=served.base) as http:
                for _ in range(PROBES // CLIENTS):
                    answer = http.get("/readyz")
                    with lock:
                        statuses.append(answer.status_code)

        start = time.monotonic()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(flood, range(CLIENTS)))
        seconds = time.monotonic() - start
    writes = _probe_writes(db)
    print(f"{PROBES} /readyz in {seconds:.2f} s: {writes} store writes")
    assert statuses == [200] * PROBES
    # One write when the first probe came, then at most one for each second that passed.
    assert 1 <= writes <= seconds + 2, (writes, seconds)


# -- truthful all the same ------------------------------------------------------------------------
class Store:
    """A store whose probe succeeds until told otherwise, and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def probe(self) -> None:
        self.calls += 1
        if self.down:
            raise StorageUnavailable("no disk")


def test_readiness_is_cached_a_second_either_way() -> None:
    now = [100.0]
    store = Store()
    ready = Readiness(store.probe, clock=lambda: now[0])
    ready.check()
    ready.check()
    assert store.calls == 1  # the second answer came from the first probe
    store.down = True
    now[0] += 0.9
    ready.check()
    assert store.calls == 1  # still within the second: the last answer stands
    now[0] += 0.2
    with pytest.raises(StorageUnavailable):
        ready.check()  # a failure is seen as soon as the second is over
    with pytest.raises(StorageUnavailable):
        ready.check()  # and answered again without a probe within the next second
    assert store.calls == 2
    store.down = False
    now[0] += 1.1
    assert not ready.cached()  # stale: the route probes again, in a thread
    ready.check()
    assert store.calls == 3 and ready.cached()  # fresh and ready: answered in the loop
