"""The hops of one HTTP delivery: which of oncebox's source files it runs through, and which
store transactions and statements it makes, measured on a real ``oncebox serve``.

    .venv/bin/python scripts/delivery_hops.py            # the checkout's own oncebox
    .venv/bin/python scripts/delivery_hops.py --src DIR  # another checkout's src/ (before/after)

The server runs under a profiler that records nothing until the driver signals it
(SIGUSR1), so start-up and a first warm-up delivery are left out; SIGUSR2 makes it write
what one accepted ``ussd`` delivery touched and stop recording. Files are counted by the
functions of theirs that ran (a module only imported does not count); transactions by the
``BEGIN``/``COMMIT`` statements SQLite was given, through APSW's connection hooks.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def use_src(src: Path) -> None:
    """Import oncebox from ``src``, even where an editable install would find another."""
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__module__.lower()]
    sys.path.insert(0, str(src))


def traced_server(out: Path, args: list[str]) -> None:
    """Run ``oncebox ARGS`` recording, between the two signals, the files and statements."""
    import apsw

    use_src(Path(os.environ["HOPS_SRC"]))

    recording = threading.Event()
    files: dict[str, int] = {}
    statements: list[str] = []

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event == "call" and recording.is_set():
            name = frame.f_code.co_filename
            if "/oncebox/" in name:
                files[name] = files.get(name, 0) + 1
        return None

    def on_statement(cursor, sql, bindings):  # type: ignore[no-untyped-def]
        if recording.is_set():
            statements.append(" ".join(sql.split())[:120])
        return True

    def hook(connection) -> None:  # type: ignore[no-untyped-def]
        connection.exec_trace = on_statement

    apsw.connection_hooks.append(hook)

    def start(signum, frame) -> None:  # type: ignore[no-untyped-def]
        files.clear()
        statements.clear()
        recording.set()

    def dump(signum, frame) -> None:  # type: ignore[no-untyped-def]
        recording.clear()
        out.write_text(json.dumps({"files": files, "statements": statements}))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, dump)
    threading.setprofile(profile)
    sys.setprofile(profile)
    sys.argv = ["oncebox", *args]
    from oncebox.surfaces.cli import main

    main()


def deliver(port: int, secret: str, record: str) -> int:
    """One new USSD frame; its key is the gateway's ``record-seq``."""
    from oncebox.formats.cksum import cksum

    seq = random.randrange(1, 10**6)
    body = f"H1|{seq}|Kakuma{random.randrange(10)}|SHE|8|71".encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/inboxes/ussd/deliveries",
        data=body + b"|#%02x" % (cksum(body) % 256),
        headers={"Authorization": f"Bearer {secret}", "Oncebox-Key": f"{record}-{seq}"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return int(answer.status)


def measure(src: Path) -> dict:
    use_src(src)
    import oncebox

    assert Path(oncebox.__file__).is_relative_to(src), oncebox.__file__

    work = Path(tempfile.mkdtemp(prefix="hops-"))
    url = f"sqlite:///{work / 'store.db'}"
    box = oncebox.open(url)
    secret = box.create_token("hops", ["*"], ["write"]).secret
    box.close()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    out = work / "trace.json"
    env = {**os.environ, "HOPS_SRC": str(src), "ONCEBOX_DB": url}
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--traced",
            str(out),
            "--",
            "serve",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        for n in range(3):
            deliver(port, secret, f"warm{n}")
        time.sleep(0.5)
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.3)
        status = deliver(port, secret, "measured")
        time.sleep(0.5)
        proc.send_signal(signal.SIGUSR2)
        for _ in range(100):
            if out.exists():
                break
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    trace = json.loads(out.read_text())
    files = sorted(
        name.split("/oncebox/", 1)[1] for name in trace["files"] if "/site-packages/" not in name
    )
    statements = trace["statements"]
    return {
        "status": status,
        "files": files,
        "transactions": sum(1 for s in statements if s.upper().startswith("BEGIN")),
        "commits": sum(1 for s in statements if s.upper().startswith(("COMMIT", "END"))),
        "statements": statements,
    }


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--traced":
        traced_server(Path(sys.argv[2]), sys.argv[4:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, default=HERE / "src", help="the src/ to measure")
    parser.add_argument("--verbose", action="store_true", help="print every file and statement")
    args = parser.parse_args()
    found = measure(args.src.resolve())
    print(f"status {found['status']}")
    print(f"oncebox files run: {len(found['files'])}")
    print(f"transactions: {found['transactions']} (commits {found['commits']})")
    print(f"statements: {len(found['statements'])}")
    if args.verbose:
        print("\n".join(found["files"]))
        print("\n".join(found["statements"]))


if __name__ == "__main__":
    main()
