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
# The console tests drive Debian's chromium-headless-shell through Playwright (no browser
# download: `playwright install` is never run): the browser without the full one's
# windowing, a third of its CPU per page. Install it once if it is missing.
if [ ! -x /usr/bin/chromium-headless-shell ] && [ -z "${ONCEBOX_TEST_CHROMIUM:-}" ]; then
    echo "test.sh: installing chromium-headless-shell from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null
fi
# The README's signing examples are run as written, with curl and openssl.
if ! command -v curl >/dev/null 2>&1 || ! command -v openssl >/dev/null 2>&1; then
    echo "test.sh: installing curl and openssl from Debian's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl openssl >/dev/null
fi
# The checks, the wheel's and the warm-up of the tests' caches are independent of one
# another and each mostly single-threaded, so they run side by side on the machine's CPUs
# (in a row they left one CPU idle for a minute). Each one's output is shown whole, in
# this order, when it has ended; if any failed, the run stops there, before the tests.
logs="$(mktemp -d /tmp/oncebox-checks-XXXXXX)"
trap 'rm -rf "$logs"' EXIT
names=()
pids=()
beside() {  # beside NAME COMMAND...: start COMMAND in the background, its output to a log
    local name="$1"
    shift
    "$@" >"$logs/$name" 2>&1 &
    names+=("$name")
    pids+=("$!")
}
beside ruff .venv/bin/ruff check .
beside mypy .venv/bin/mypy
beside lint-imports .venv/bin/lint-imports --no-cache
# The documentation site: a broken link, anchor or include fails the build.
beside mkdocs env NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$logs/site"
beside wheel-check bash scripts/wheel-check.sh  # the built wheel, installed alone, runs the demo and an ingest
# Compiled once, before the workers start. The tests start hundreds of `oncebox`
# processes, each of which would otherwise compile every module it imports; and each
# worker would rewrite the asserts of every test module and of every pytest plugin's
# package (hypothesis: pytest rewrites it whole), twenty seconds of CPU apiece. One
# collection with bytecode kept (even where PYTHONDONTWRITEBYTECODE is set) leaves both
# caches for the workers; a collection error shows in the run itself.
beside warm-caches bash -c '.venv/bin/python -m compileall -q src tests >/dev/null
    PYTHONDONTWRITEBYTECODE= .venv/bin/python -m pytest --collect-only -q -p no:cacheprovider \
        -p no:schemathesis >/dev/null 2>&1 || true'
failed=()
for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || failed+=("${names[$i]}")
    cat "$logs/${names[$i]}"
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "test.sh: failed: ${failed[*]}" >&2
    exit 1
fi
rm -rf "$logs"
trap - EXIT
# On several workers (pytest-xdist): many tests wait on processes, servers, fsyncs and a
# browser, so four workers keep two CPUs busy (the run is bound by CPU:
# docs/contributing.md). A module's tests stay on one worker (--dist loadscope), in
# order, sharing its fixtures, and modules are handed out in collection order, longest
# first (tests/conftest.py), not xdist's own order by number of tests, which left the
# campaigns of a few long tests to the end. ONCEBOX_TEST_WORKERS=0 runs them in this
# process, one after another. schemathesis's pytest plugin is left out (as
# in the collection above): tests/test_schemathesis.py drives Hypothesis itself, and the
# plugin cost each of the five pytest processes most of a second before any test.
#
# The tests make and delete files by the tens of thousands (stores, logs, servers' data
# directories). On this project's ext4 disk each new file cost 0.6 ms of kernel CPU
# looking for an inode not recently deleted, against 0.02 ms in memory, so their
# temporary files (TMPDIR, pytest's tmp_path) go in /dev/shm where there is one, and are
# removed afterwards. Nothing the tests check depends on the disk: crashes are
# processes killed, power cuts are simulated in a VFS (reliability/powerloss.py).
if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    TMPDIR="$(mktemp -d /dev/shm/oncebox-tests-XXXXXX)"
    export TMPDIR
    trap 'rm -rf "$TMPDIR"' EXIT
fi
.venv/bin/python -m pytest -q -n "${ONCEBOX_TEST_WORKERS:-4}" --dist loadscope \
    --no-loadscope-reorder -p no:schemathesis "$@"
