#!/usr/bin/env bash
# Set up, then run the main job: the HTTP service with its operator console on the embedded
# SQLite store (oncebox-demo.db in this folder), after loading a little demo traffic. It
# prints the console's URL and a demo token, then serves in the foreground; Ctrl-C stops
# it. Extra arguments go to `oncebox serve` (e.g. --port 9000). The old founding-scenarios
# demo is `.venv/bin/oncebox demo`.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
exec .venv/bin/oncebox --db sqlite:///oncebox-demo.db serve --demo "$@"
