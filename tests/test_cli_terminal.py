"""The command line as a person and as a script see it, as real processes: through a
pseudo-terminal a listing is a table, through a pipe the same command prints JSON."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path

import pytest

from serveproc import ONCEBOX

pytestmark = pytest.mark.slow  # the oncebox command as processes

LINES = b"".join(
    json.dumps({"frame_id": key, "frame": frame}).encode() + b"\n"
    for key, frame in [
        ("rec1-1", "H1|1|Kakuma1|MED|3|86|#89"),
        ("rec1-1", "H1|1|Kakuma1|MED|9|86|#95"),
        ("rec1-2", "H1|2|Kakuma1|MED|3|86|#00"),
    ]
)


def on_a_terminal(*args: str, cwd: Path) -> str:
    """What the command writes to a terminal (a pty) 120 columns wide."""
    main, other = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm"}
    process = subprocess.Popen(
        [*ONCEBOX, *args], stdout=other, stderr=subprocess.PIPE, cwd=cwd, env=env
    )
    os.close(other)
    out = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the other end closed: the process is done
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert process.wait(timeout=60) == 0, process.stderr.read() if process.stderr else ""
    return out.decode()


def test_a_terminal_sees_tables_and_a_pipe_sees_json(tmp_path: Path) -> None:
    fed = subprocess.run(
        [*ONCEBOX, "ingest", "ussd"], input=LINES, capture_output=True, cwd=tmp_path, timeout=60
    )
    assert fed.returncode == 0, fed.stderr
    assert len(fed.stdout.splitlines()) == 3  # the decisions, for a script
    assert fed.stderr.decode().splitlines()[-1] == (
        "ingested 3: 1 accepted, 0 duplicate, 1 conflict, 1 rejected (bad_checksum 1)"
    )
    table = on_a_terminal("dead-letters", cwd=tmp_path)
    assert not table.lstrip().startswith("[")
    assert "reason" in table and "bad_checksum" in table and "rec1-2" in table
    shown = on_a_terminal("quarantine", "show", "1", cwd=tmp_path)
    assert "3 -> 9" in shown
    piped = subprocess.run(
        [*ONCEBOX, "dead-letters"], capture_output=True, cwd=tmp_path, timeout=60, check=True
    )
    [letter] = json.loads(piped.stdout)
    assert letter["reason"] == "bad_checksum" and letter["key"] == "rec1-2"
    as_json = on_a_terminal("dead-letters", "--json", cwd=tmp_path)
    assert json.loads(as_json) == [letter]
