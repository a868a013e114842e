#!/usr/bin/env bash
# Set up, then run the main job on the embedded SQLite store: the founding scenarios.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
exec .venv/bin/oncebox demo "$@"
