#!/usr/bin/env bash
# Set up, then run the whole test suite: lint, types, the docs' build, and every test.
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
# The Redis Streams adapter's tests start their own redis-server on 127.0.0.1 (no
# persistence, stopped afterwards); install Debian's server once if it is missing.
if ! command -v redis-server >/dev/null 2>&1; then
    echo "test.sh: installing redis-server from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
fi
# The console tests drive Debian's chromium through Playwright (no browser download:
# `playwright install` is never run); install the system browser once if it is missing.
if [ ! -x /usr/bin/chromium ] && [ -z "${ONCEBOX_TEST_CHROMIUM:-}" ]; then
    echo "test.sh: installing chromium from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# The README's signing examples are run as written, with curl and openssl.
if ! command -v curl >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
    echo "test.sh: installing curl and openssl from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl openssl >/dev/null
fi
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports --no-cache
# The documentation site: a broken link, anchor or include fails the build.
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$(mktemp -d)"
bash scripts/wheel-check.sh  # the built wheel, installed alone, runs the demo and an ingest
# Compiled once, before the workers start. The tests start hundreds of `oncebox`
# processes, each of which would otherwise compile every module it imports; and each
# worker would rewrite the asserts of every test module and of every pytest plugin's
# package (hypothesis, schemathesis: pytest rewrites them whole), twenty seconds of CPU
# apiece. One collection with bytecode kept (even where PYTHONDONTWRITEBYTECODE is set)
# leaves both caches for the workers; a collection error shows in the run itself.
.venv/bin/python -m compileall -q src tests >/dev/null
PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider \
    >/dev/null 2>&1 || true
# On several workers (pytest-xdist): many tests wait on processes, servers, fsyncs and a
# browser, so four workers keep two CPUs busy (the run is bound by CPU: docs/contributing.md). A module's tests stay on one
# worker (--dist loadscope), in order, sharing its fixtures. ONCEBOX_TEST_WORKERS=0 runs
# them in this process, one after another.
exec .venv/bin/python -m pytest -q -n "${ONCEBOX_TEST_WORKERS:-4}" --dist loadscope "$@"
