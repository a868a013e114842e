#!/usr/bin/env bash
# Build the wheel, install it into a fresh virtual environment (not the editable .venv),
# and run the demo and one ingest from it: a file the package needs but does not ship
# (its SQL, py.typed, the console's static files and templates) fails here instead of for
# a user.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d /tmp/oncebox-wheel-XXXXXX)"
trap 'rm -rf "$work"' EXIT
# setuptools reuses build/ without dropping files since removed or renamed (a renumbered
# migration would ship twice), so the wheel is built from a clean one.
rm -rf build
.venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$work/dist" .
# A bare environment (no pip of its own: bootstrapping one costs ten seconds of CPU), the
# wheel and the dependencies it declares installed into it by .venv's pip; none of them
# compiled ahead (pip would compile every dependency's modules; the demo compiles what
# it imports).
python3 -m venv --without-pip "$work/venv"
.venv/bin/python -m pip --python "$work/venv/bin/python" install --quiet \
    --disable-pip-version-check --no-compile \
    "$work"/dist/oncebox-*.whl 2> >(grep -v "^WARNING: Location" >&2)
cd "$work"  # nothing of the checkout on the path
"$work/venv/bin/oncebox" demo >/dev/null
frame='{"frame_id": "rec1-1", "frame": "H1|1|Kakuma1|MED|3|86|#89"}'
out="$(printf '%s\n%s\n' "$frame" "$frame" | "$work/venv/bin/oncebox" --db "sqlite:///$work/w.db" ingest ussd -)"
echo "$out" | grep -q '"verdict": *"accepted"' || { echo "wheel-check: no accepted decision: $out" >&2; exit 1; }
echo "$out" | grep -q '"verdict": *"duplicate"' || { echo "wheel-check: no duplicate decision: $out" >&2; exit 1; }
"$work/venv/bin/python" -c 'import oncebox, importlib.resources as r; assert (r.files("oncebox") / "py.typed").is_file()'
# The console's templates: each one there and compiling, and the sign-in page rendered.
"$work/venv/bin/python" - <<'PY'
from oncebox.surfaces.http.console.html import ENV, render
names = ENV.list_templates()
assert "base.html" in names and "quarantine.html" in names, names
for name in names:
    ENV.get_template(name)
page = render("signin.html", None, "Sign in", nonce="n", refusal="<b>")
assert 'name="signin" value="n"' in page and "&lt;b&gt;" in page, page
PY
echo "wheel-check: the installed wheel ran the demo and decided an ingest"
