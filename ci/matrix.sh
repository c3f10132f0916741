#!/usr/bin/env bash
# `make matrix`: tfyard on every Python it supports and on the oldest versions it declares.
#
# Legs py3.10 to py3.13: a fresh venv on that Python, `make demo` (its install and run: it
# must reach the 95 % validation accuracy it promises and export its model), then
# `make quick` (every extra, the quick slice). Leg `lowest`: Python 3.10 with every
# dependency pinned to the lower bound pyproject.toml declares (ci/lowest.py), `make quick`.
# A Python not on the machine fails the check by name. The legs run in parallel and install
# through uv (fetched from PyPI into build/matrix/uv; its cache holds one copy of each
# wheel); each leg's output is build/matrix/<leg>.log.
# Usage: bash ci/matrix.sh [LEG...]   (default: every leg; `make matrix LEGS=...`)
set -uo pipefail
cd "$(dirname "$0")/.."
LEGS=(py3.10 py3.11 py3.12 py3.13 lowest)
[ $# -eq 0 ] || LEGS=("$@")
LOWEST_PYTHON=3.10
WORK=$PWD/build/matrix

find_python() {   # the interpreter of Python $1; pyenv's shims run only selected versions
    local path version
    if path=$(python"$1" -c 'import sys; print(sys.executable)' 2>/dev/null); then
        echo "$path"
    elif command -v pyenv >/dev/null &&
            version=$(pyenv versions --bare | grep -E "^$1\.[0-9]+$" | tail -1) &&
            [ -n "$version" ]; then
        echo "$(pyenv prefix "$version")/bin/python$1"
    else
        return 1
    fi
}

leg() {   # leg NAME PYTHON TARGET...: a fresh venv at build/matrix/NAME, then `make TARGET...`
    local name=$1 python=$2 venv=$WORK/$1
    shift 2
    rm -rf "$venv"
    VIRTUAL_ENV=$venv make --no-print-directory VENV="$venv" PYTHON="$python" PIP="$UV pip" \
        DEMO_ARGS="--output_dir $venv/demo" "$@" >"$WORK/$name.log" 2>&1
}

demo_kept_its_promise() {   # leg NAME's demo (if it ran one) reached 95 % and exported
    local name=$1 demo=$2 percent
    [ "$name" = lowest ] && return 0
    percent=${demo//[^0-9.]/}
    if [ -z "$percent" ] || ! awk -v p="$percent" 'BEGIN { exit !(p >= 95) }' ||
            [ ! -f "$WORK/$name/demo/export/model.keras" ]; then
        echo "error: the demo promised validation accuracy >= 95% and export/model.keras, got" \
             "'${demo:-no accuracy line}'" >>"$WORK/$name.log"
        return 1
    fi
}

mkdir -p "$WORK"
declare -A python
failed=0
for name in "${LEGS[@]}"; do
    version=${name#py}
    [ "$name" = lowest ] && version=$LOWEST_PYTHON
    if path=$(find_python "$version"); then
        python[$name]=$path
    else
        echo "matrix: $name: FAILED: Python $version is not on this machine (python$version" \
             "on PATH or a pyenv version); tfyard supports it, so the check needs it"
        failed=1
    fi
done
[ ${#python[@]} -gt 0 ] || exit 1
tool=$(find_python 3.13 || find_python 3.12 || find_python 3.11) ||   # tomllib, uv
    { echo "matrix: FAILED: reading pyproject.toml needs a Python 3.11+"; exit 1; }

UV=$WORK/uv/bin/uv
[ -x "$UV" ] || { "$tool" -m venv "$WORK/uv" &&
                  "$WORK/uv/bin/pip" install --quiet uv >"$WORK/uv.log" 2>&1; } ||
    { echo "matrix: FAILED: could not install uv from PyPI ($WORK/uv.log)"; exit 1; }
"$tool" ci/lowest.py >"$WORK/lowest.txt" || exit 1

# PySpark comes only as a source archive of ~450 MB whose build leaves ~1.3 GB in uv's cache.
# Legs that build it at once each leave their own copy (a CI disk once filled up this way),
# so it is built here, once for the newest and once for the lowest version, before the legs.
pyspark=$("$tool" -c 'import tomllib; extras = tomllib.load(open("pyproject.toml", "rb"))
print(next(r for r in extras["project"]["optional-dependencies"]["spark"]
           if r.startswith("pyspark")).replace("[sql]", ""))')
for constraint in /dev/null "$WORK/lowest.txt"; do
    rm -rf "$WORK/pyspark"
    UV_CONSTRAINT=$constraint UV_BUILD_CONSTRAINT=$constraint "$UV" pip install --quiet --python "$tool" --no-deps \
        --target "$WORK/pyspark" "$pyspark" >>"$WORK/uv.log" 2>&1 ||
        { echo "matrix: FAILED: could not build $pyspark ($WORK/uv.log)"; exit 1; }
done
rm -rf "$WORK/pyspark"

start=$SECONDS
declare -A pids
for name in "${!python[@]}"; do
    if [ "$name" = lowest ]; then
        UV_CONSTRAINT=$WORK/lowest.txt UV_BUILD_CONSTRAINT=$WORK/lowest.txt \
            leg lowest "${python[$name]}" quick &
    else
        leg "$name" "${python[$name]}" demo quick &
    fi
    pids[$name]=$!
done
for name in $(printf '%s\n' "${!pids[@]}" | sort); do
    log=$WORK/$name.log
    wait "${pids[$name]}"
    status=$?
    demo=$(grep -o 'validation accuracy [0-9.]*%' "$log")
    if [ "$status" -eq 0 ] && demo_kept_its_promise "$name" "$demo"; then
        tests=$(grep -oE '[0-9]+ passed.* in [0-9.]+s' "$log" | tail -1)
        echo "matrix: $name: passed (${demo:+demo: $demo; }quick: $tests)"
        rm -rf "${WORK:?}/$name"   # a passed leg's venv is not needed again
    else
        echo "matrix: $name: FAILED (build/matrix/$name.log):"
        grep -E '^(E |FAILED|ERROR|error|  cause)|Error' "$log" | tail -5 | sed 's/^/    /'
        failed=1
    fi
done
# uv's cache keeps one build of each source archive, not one a run.
"$UV" cache prune --quiet >>"$WORK/uv.log" 2>&1
echo "matrix: ${SECONDS}s in all, $((SECONDS - start))s for the legs; lowest versions:" \
     "$(paste -sd' ' "$WORK/lowest.txt")"
exit $failed
