#!/usr/bin/env bash
# Set up, then run the whole test suite: lint, types, and every test.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
