#!/usr/bin/env bash
# `make test-install`: jaxload as a user gets it. Builds the wheel, installs it with [tf,grain]
# into a fresh virtual environment (build/install-venv), and runs examples/quickstart.py (the
# README's Quick start) under `jaxload launch -n 2 --local-devices 4`, checking what it prints.
# PYTHON: the interpreter for the environment (default: tools/find_python.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(tools/find_python.sh)}
OUT=build/install
VENV=$OUT/venv
rm -rf "$OUT" && mkdir -p "$OUT/dist"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$OUT/dist" . >"$OUT/build.log" 2>&1 ||
    { cat "$OUT/build.log"; exit 1; }
wheel=$(ls "$OUT"/dist/jaxload-*.whl)
# -c constraints.txt: the versions `make test` tests (a user's pip takes the newest it can)
"$VENV/bin/python" -m pip install --quiet -c constraints.txt "$wheel[tf,grain]"
# run away from the checkout, so that its jaxload/ folder cannot be imported instead
cp examples/quickstart.py "$OUT/"
(cd "$OUT" && venv/bin/python -c "import jaxload, sys; assert 'site-packages' in jaxload.__file__, jaxload.__file__" &&
    venv/bin/jaxload launch -n 2 --local-devices 4 -- python quickstart.py) | tee "$OUT/out.txt"
for line in \
    "[0] process 0: loading group 0 of 2, 32 rows per step; step 0 sums 2016.0" \
    "[1] process 1: loading group 1 of 2, 32 rows per step; step 0 sums 2016.0" \
    "[0] 15 steps of 64 rows on 8 devices" \
    "[1] 15 steps of 64 rows on 8 devices"; do
    grep -qxF -- "$line" "$OUT/out.txt" || { echo "test-install: missing line: $line" >&2; exit 1; }
done
echo "test-install: the wheel ($(basename "$wheel")) installed with [tf,grain] runs the quick start"
