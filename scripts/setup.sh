#!/usr/bin/env bash
# Set up everything oncebox needs on a fresh Debian machine: a Python 3.11+ virtual
# environment in .venv with oncebox and its development tools installed.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "setup: oncebox needs Python 3.11 or newer as $PYTHON" >&2
    exit 1
fi
need_apt=()
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v cksum >/dev/null || need_apt+=(coreutils)
if [ "${#need_apt[@]}" -gt 0 ]; then
    echo "setup: installing ${need_apt[*]} from Debian's packages" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
