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
# What was installed is stamped with the SHA-256 of what decides it (the dependencies in
# pyproject.toml, and this script). On a checkout set up already, with the same stamp and
# oncebox importable, there is nothing to install: a restart takes seconds, not minutes.
# The package is installed editable, so changes to the source need no reinstall.
STAMP=.venv/.oncebox-setup
wanted="$(cat pyproject.toml scripts/setup.sh | "$PYTHON" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')"
if [ "${ONCEBOX_SETUP_FORCE:-}" != 1 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ] \
    && .venv/bin/python -c 'import oncebox' 2>/dev/null; then
    exit 0
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip 2>/dev/null || true
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
echo "$wanted" > "$STAMP"
