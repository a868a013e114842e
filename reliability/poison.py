"""Can one sender's bad deliveries starve everyone else's (issue 19, item 1)?

Starts ``oncebox serve --workers 1`` on a fresh SQLite file (or ``--db`` URL) with a
``json`` inbox whose apply step is ``triage``, then runs ``--honest`` clients that each
send distinct, valid cases and ``--poison`` clients that loop deliveries the step cannot
take (``"site": null``, a headcount of ``"3"``, ``3.5`` or ``-1``), all at once, for
``--seconds``. It prints how many honest deliveries were not accepted, what the poison
ones were answered, whether any answer named the store's tables, and the headcount the
ledger holds against what the accepted honest cases add up to.

Run it against another checkout's code (the negative control: the code before the fix)
with ``--oncebox-src PATH/src``.

    .venv/bin/python reliability/poison.py                       # ~30 s
    .venv/bin/python reliability/poison.py --oncebox-src /tmp/before/src
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from serveproc import get, serving  # noqa: E402

CONFIG = """
[inboxes.cases]
codec = "json"
identity = ["/id"]
fields = { site = "/site", need = "/need", headcount = "/headcount", pri = "/pri" }
apply = "triage"
"""
POISON = [{"site": None}, {"headcount": "3"}, {"headcount": 3.5}, {"headcount": -1}]
STORE_WORDS = ("triage_ledger", "constraint", "SQLite", "PostgreSQL", "NOT NULL")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--honest", type=int, default=8)
    parser.add_argument("--poison", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--db", help="a store URL (default: a fresh SQLite file)")
    parser.add_argument("--oncebox-src", help="run the server from this src folder")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="oncebox-poison-"))
    config = workdir / "oncebox.toml"
    config.write_text(CONFIG)
    url = args.db or f"sqlite:///{workdir / 'poison.db'}"
    env = {"ONCEBOX_CONFIG": str(config)}
    if args.oncebox_src:
        env["PYTHONPATH"] = str(Path(args.oncebox_src).resolve())
        os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    secret = _token(url, config, env)

    honest: Counter[str] = Counter()
    poisoned: Counter[str] = Counter()
    leaks: list[str] = []
    headcount = 0
    lock = threading.Lock()
    stop = time.monotonic() + args.seconds
    ids = itertools.count()

    def send(document: dict[str, object]) -> tuple[int, dict[str, object]]:
        body = json.dumps(document).encode()
        status, _, answer = get(f"{base}/v1/inboxes/cases/deliveries", secret, body)
        text = answer.decode("utf-8", "replace")
        if any(word in text for word in STORE_WORDS):
            with lock:
                leaks.append(text[:200])
        return status, json.loads(answer)

    def honest_client() -> None:
        nonlocal headcount
        while time.monotonic() < stop:
            n = next(ids)
            case = {"id": f"h{n}", "site": f"S{n % 7}", "need": "MED", "headcount": n % 5,
                    "pri": n % 90}  # fmt: skip
            status, answer = send(case)
            with lock:
                honest[f"{status} {answer.get('verdict', answer.get('type', '?'))}"] += 1
                if status == 201:
                    headcount += n % 5

    def poison_client(which: int) -> None:
        for n in itertools.count():
            if time.monotonic() >= stop:
                return
            case = {"id": f"p{which}-{n}", "site": "S", "need": "MED", "headcount": 1, "pri": 1}
            case.update(POISON[n % len(POISON)])
            status, answer = send(case)
            with lock:
                poisoned[f"{status} {answer.get('reason', answer.get('type', '?'))}"] += 1

    with serving(url, "--workers", "1", env=env) as server:
        base = server.base
        threads = [threading.Thread(target=honest_client) for _ in range(args.honest)]
        threads += [threading.Thread(target=poison_client, args=(i,)) for i in range(args.poison)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        _, _, ledger = get(f"{base}/v1/inboxes/cases/triage", secret)
    stored = json.loads(ledger).get("headcount")
    sent = sum(honest.values())
    failed = sent - honest.get("201 accepted", 0)
    print(f"honest deliveries: {sent}, not accepted: {failed} ({dict(honest)})")
    print(f"poison deliveries: {sum(poisoned.values())} ({dict(poisoned)})")
    print(f"answers naming the store's tables: {len(leaks)}")
    print(f"ledger headcount {stored}, accepted honest cases add up to {headcount}")
    return 0


def _token(url: str, config: Path, env: dict[str, str]) -> str:
    import subprocess

    code = (
        "import oncebox, sys; box = oncebox.open(sys.argv[1], config=sys.argv[2]); "
        "print(box.create_token('poison', ['*'], ['read', 'write']).secret)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url, str(config)],
        env={**os.environ, **env},
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().strip()


if __name__ == "__main__":
    sys.exit(main())
