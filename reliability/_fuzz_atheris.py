"""One atheris (libFuzzer) run of one target from _fuzz_targets.py, in its own process.

Why a separate process: libFuzzer owns the process (it exits when done, and skips
Python's exit handlers), so reliability/fuzz.py starts this script once per target and
reads the figures it writes to ``SUMMARY`` after the last execution.

    python reliability/_fuzz_atheris.py TARGET SUMMARY RUNS [libFuzzer flags] CORPUS_DIR

Crashes are counted, not fatal: the target wrapper catches every exception, records it
and goes on, so one run reports how many inputs crashed, not just the first. libFuzzer's
own ``-timeout`` stays armed as a backstop for a real hang.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["oncebox", "_fuzz_targets"]):
    import _fuzz_targets


def main() -> None:
    target, summary, runs = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    fn = _fuzz_targets.TARGETS[target]
    stats = _fuzz_targets.Stats(target)

    def write() -> None:
        summary.write_text(json.dumps(stats.to_json()))

    def one(data: bytes) -> None:
        stats.run(fn, data)
        if stats.executions == runs or stats.executions % 10_000 == 0:
            write()

    atheris.Setup([sys.argv[0], *sys.argv[4:], f"-runs={runs}"], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
