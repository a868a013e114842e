"""Readers for the reconciler that plug in without Python."""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Sequence

from oncebox.engine.reconciler import ReadResult, WorkKey
from oncebox.errors import ReadFailed


class CommandReader:
    """Run a command per work key: the key as JSON on stdin, the document on stdout.

    ``{"seller_id": ..., "sku": ..., "marketplace_id": ...}`` goes in; a JSON object must
    come out. A non-zero exit, a timeout or anything else on stdout is a read failure,
    so the key stays dirty. The command is the trusted adapter: it must check the
    response it got and exit non-zero rather than print ``{}`` when data is missing.
    """

    def __init__(self, command: str | Sequence[str], timeout: float = 30.0) -> None:
        self.argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not self.argv:
            raise ReadFailed("the reader command is empty")
        self.timeout = timeout

    def __call__(self, key: WorkKey) -> ReadResult:
        try:
            done = subprocess.run(
                self.argv,
                input=json.dumps(key.to_dict()).encode(),
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ReadFailed(f"{self.argv[0]} took longer than {self.timeout:g} s") from None
        except OSError as exc:
            raise ReadFailed(f"cannot run {self.argv[0]}: {exc.strerror}") from None
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip()[-300:]
            raise ReadFailed(f"{self.argv[0]} exited {done.returncode}: {tail}")
        return ReadResult(key, done.stdout)
