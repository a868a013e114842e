#!/usr/bin/env bash
# Set up, then run the whole test suite: lint, types, and every test.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup.sh
# The PostgreSQL tests start their own throwaway server (a unix socket in /tmp, stopped
# afterwards) from Debian's server binaries; install them once if they are missing.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && [ -z "${ONCEBOX_TEST_PG:-}" ]; then
    echo "test.sh: installing postgresql from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -q "$@"
