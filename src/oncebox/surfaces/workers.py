"""Worker processes: N forked copies of one job, under a supervisor that ends them together.

``oncebox serve --workers N`` and ``oncebox consume --workers N`` use it. Each worker is a
fork of a supervisor that holds no store connection and no thread (so nothing is shared
across the fork), and opens its own store after the fork. The supervisor:

- forwards SIGINT and SIGTERM to every worker as one SIGTERM each. Workers run in a
  process group of their own, so a Ctrl-C at the terminal reaches them only this way,
  once, and they shut down gracefully instead of taking a second signal as "force";
- stops the others when one worker fails (exits non-zero, or dies of a signal other than
  SIGINT or SIGTERM), and reports the failure: a process manager then restarts the whole
  service, rather than the supervisor hiding a crash loop; a worker stopped by SIGINT or
  SIGTERM from elsewhere stops the others too, as a clean end;
- leaves no orphans: each worker asks the kernel (``PR_SET_PDEATHSIG``) for SIGTERM when
  the supervisor dies, even by ``kill -9``.

A worker's result (anything JSON can carry) comes back to the supervisor over a pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import select
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from oncebox.errors import OnceboxError
from oncebox.logtext import escaped

log = logging.getLogger("oncebox.workers")

PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class WorkerFailed(OnceboxError):
    """A worker ended badly; the others were stopped."""


def cpu_count() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _die_with(parent: int) -> None:
    """Ask for SIGTERM when the supervisor dies; if it already has, go now."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def _child(index: int, job: Callable[[int], Any], write: int, parent: int) -> None:
    """In the fork: run the job, send its result, and never return into the caller."""
    code = 1
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        os.setpgid(0, 0)
        _die_with(parent)
        result = job(index)
        with os.fdopen(write, "w") as out:
            json.dump(result, out)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # one line, as the CLI reports errors
        shown = escaped(str(exc))  # what failed may quote what someone sent
        print(f"oncebox: worker {index}: {type(exc).__name__}: {shown}", file=sys.stderr)
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def run_workers(count: int, job: Callable[[int], Any]) -> list[Any]:
    """``job(1)`` ... ``job(count)``, each in a worker process; their results, in order.

    Returns once every worker has ended: by itself, or after SIGINT/SIGTERM reached the
    supervisor or any worker (a worker ended by such a signal counts as a clean end, and
    its result is None). Raises :class:`WorkerFailed` if one failed (exited non-zero or
    died of another signal), after stopping the others.
    """
    parent = os.getpid()
    stopping = False
    pids: dict[int, int] = {}  # pid -> worker index
    pipes: dict[int, int] = {}  # read fd -> worker index
    output: dict[int, bytes] = {}

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop()

    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    failure: str | None = None
    try:
        for index in range(1, count + 1):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(read)
                _child(index, job, write, parent)
            os.close(write)
            pids[pid] = index
            pipes[read] = index
            output[index] = b""
            if stopping:  # a signal came while forking: the new worker stops too
                stop()
        while pids or pipes:
            with contextlib.suppress(InterruptedError):
                ready, _, _ = select.select(list(pipes), [], [], 0.2)
                for fd in ready:
                    chunk = os.read(fd, 65536)
                    if chunk:
                        output[pipes[fd]] += chunk
                    else:
                        os.close(fd)
                        del pipes[fd]
            while pids:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                index = pids.pop(pid)
                if os.WIFSIGNALED(status) and os.WTERMSIG(status) in STOP_SIGNALS:
                    if not stopping:  # told to stop from outside: the others stop too
                        log.warning("worker %d was stopped; stopping the others", index)
                        stop()
                elif not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                    if failure is None:
                        failure = f"worker {index} {_how(status)}"
                        log.error("%s; stopping the others", failure)
                    stop()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for fd in pipes:
            os.close(fd)
    if failure is not None:
        raise WorkerFailed(failure)
    return [json.loads(output[i]) if output[i] else None for i in range(1, count + 1)]


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"died of {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"
