#!/usr/bin/env bash
# `make matrix`: tfyard on every Python it supports and on the oldest versions it declares.
#
# Each Python 3.10-3.13: a fresh venv, `make demo` (its install and run), then `make quick`
# (every extra, the quick slice). Then Python 3.10 with every dependency pinned to the lower
# bound pyproject.toml declares (ci/lowest.py) runs `make quick`. A Python not on the machine
# fails the check by name. The legs run in parallel and install through uv (fetched from
# PyPI into build/matrix/uv; its cache shares one copy of each wheel); each leg's output is
# build/matrix/<leg>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTHONS=(3.10 3.11 3.12 3.13)
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

mkdir -p "$WORK"
declare -A found
failed=0
for version in "${PYTHONS[@]}"; do
    if path=$(find_python "$version"); then
        found[$version]=$path
        echo "matrix: Python $version is $path"
    else
        echo "matrix: FAILED: Python $version is not on this machine (python$version on PATH" \
             "or a pyenv version); tfyard supports it, so the check needs it"
        failed=1
    fi
done
newest=${found[${PYTHONS[-1]}]:-python3}

UV=$WORK/uv/bin/uv
[ -x "$UV" ] || { "$newest" -m venv "$WORK/uv" && "$WORK/uv/bin/pip" install --quiet uv; } ||
    { echo "matrix: FAILED: could not install uv from PyPI"; exit 1; }
"$newest" ci/lowest.py >"$WORK/lowest.txt" || exit 1

start=$SECONDS
declare -A pids
for version in "${!found[@]}"; do
    leg "py$version" "${found[$version]}" demo quick &
    pids[py$version]=$!
done
if [ -n "${found[${PYTHONS[0]}]:-}" ]; then
    UV_CONSTRAINT=$WORK/lowest.txt UV_BUILD_CONSTRAINT=$WORK/lowest.txt leg lowest "${found[${PYTHONS[0]}]}" quick &
    pids[lowest]=$!
fi
for name in $(printf '%s\n' "${!pids[@]}" | sort); do
    if wait "${pids[$name]}"; then
        result="passed: $(grep -o 'validation accuracy [0-9.]*%' "$WORK/$name.log")"
        result+="; quick: $(grep -oE '[0-9]+ passed[^=]*' "$WORK/$name.log" | tail -1)"
    else
        result="FAILED (build/matrix/$name.log)"
        failed=1
    fi
    echo "matrix: $name: $result"
done
echo "matrix: $((SECONDS - start)) s for the legs; lowest versions: $(paste -sd' ' "$WORK/lowest.txt")"
exit $failed
