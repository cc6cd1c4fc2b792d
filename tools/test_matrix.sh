#!/usr/bin/env bash
# `make test-matrix`: the tf.data tests on every tensorflow-cpu minor release (its newest patch)
# and the Grain tests on every grain release, from pyproject.toml's floor to the newest on the
# index; one line per version, then the lines again as a summary. Each version gets its own
# environment, .venv-matrix/<package>-<version>, built once (kept for the next run) from the
# shared pip cache. The versions run one after another. Exits 1 if any version failed.
#   tools/test_matrix.sh                 every version of both packages
#   tools/test_matrix.sh grain 0.2.14    one version
# PYTHON: the interpreter of the environments (default python3: the floors need Python >= 3.11,
# and TensorFlow 2.18/2.19 have no wheels for 3.13).
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-$HOME/.cache/pip}
ROOT=.venv-matrix
mkdir -p "$ROOT"
TF_TESTS=(tests/test_tf_*.py tests/test_service.py tests/test_compat.py tests/test_versions.py)
GRAIN_TESTS=(tests/test_grain_*.py tests/test_compat.py tests/test_versions.py)
TOOLS=(pytest==9.2.0 pytest-timeout==2.4.0 pytest-xdist==3.8.0)

floor() {  # pyproject.toml's floor of package $1
    "$PYTHON" -c 'import re, sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
reqs = p["dependencies"] + [r for e in p["optional-dependencies"].values() for r in e]
print(next(m[1] for r in reqs if (m := re.fullmatch(re.escape(sys.argv[1]) + r">=(\S+)", r))))' "$1"
}

releases() {  # $1's releases from floor $2 on (for tensorflow-cpu: the newest patch per minor)
    "$PYTHON" -m pip index versions "$1" 2>/dev/null | "$PYTHON" -c 'import re, sys
name, low = sys.argv[1], sys.argv[2]
key = lambda v: tuple(int(x) for x in v.split("."))
found = re.search(r"Available versions: (.*)", sys.stdin.read())
if not found:
    sys.exit(f"no versions of {name} on the index")
vs = sorted((v for v in found[1].split(", ") if re.fullmatch(r"\d+(\.\d+)*", v)
             and key(v) >= key(low)), key=key)
if name == "tensorflow-cpu":
    vs = [v for i, v in enumerate(vs) if i + 1 == len(vs) or key(vs[i + 1])[:2] != key(v)[:2]]
print(" ".join(vs))' "$1" "$2"
}

RESULTS=()
run_one() {  # package, version, test files...
    local package=$1 version=$2 env="$ROOT/$1-$2" log="$ROOT/$1-$2.install.log" extra
    shift 2
    extra=$([ "$package" = grain ] && echo grain || echo tf)
    local start=$SECONDS line
    if [ ! -f "$env/.installed" ]; then
        rm -rf "$env"
        if ! { "$PYTHON" -m venv "$env" && "$env/bin/python" -m pip install --quiet --upgrade pip &&
               "$env/bin/python" -m pip install --quiet -e ".[$extra,orbax]" "$package==$version" \
                   "${TOOLS[@]}"; } >"$log" 2>&1; then
            line="$package $version: FAILED to install (see $log)"
            RESULTS+=("$line"); echo "$line"; return
        fi
        touch "$env/.installed"
    fi
    local installed
    installed=$("$env/bin/python" -c 'import importlib.metadata as m, sys
print(" ".join(f"{n} {m.version(n)}" for n in sys.argv[1:]))' "$package" jax numpy 2>/dev/null)
    log="$ROOT/$package-$version.test.log"
    if "$env/bin/python" -m pytest -q -n 2 --dist loadgroup -p no:cacheprovider "$@" >"$log" 2>&1
    then line="$package $version: passed"; else line="$package $version: FAILED"; fi
    line="$line, $(grep -E '^=*.* (passed|failed|error)' "$log" | tail -n 1 | tr -d '=' | xargs)"
    line="$line ($installed; $((SECONDS - start)) s)"
    RESULTS+=("$line"); echo "$line"
}

if [ $# -eq 2 ]; then
    if [ "$1" = grain ]; then run_one grain "$2" "${GRAIN_TESTS[@]}"
    else run_one tensorflow-cpu "$2" "${TF_TESTS[@]}"; fi
else
    for v in $(releases tensorflow-cpu "$(floor tensorflow-cpu)"); do
        run_one tensorflow-cpu "$v" "${TF_TESTS[@]}"
    done
    for v in $(releases grain "$(floor grain)"); do
        run_one grain "$v" "${GRAIN_TESTS[@]}"
    done
fi
echo "== test-matrix"
printf '%s\n' "${RESULTS[@]}"
! printf '%s\n' "${RESULTS[@]}" | grep -q FAILED
