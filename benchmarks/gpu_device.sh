#!/usr/bin/env bash
# benchmarks/gpu.py on a GPU machine that has Python 3.12 but no TensorFlow and no registry:
# the wheels of `tensorflow[and-cuda]`, keras and optuna come as a tar split into parts
# (benchmarks/gpu_parts.sh makes them and says what they leave out; `PARTS`, joined in name
# order), are unpacked side by side into one site folder (so TensorFlow finds the nvidia/*
# libraries and ptxas beside it, as pip would place them), and the run's figures go to OUT.
#   PARTS=/tmp/parts SITE=/tmp/site OUT=... bash benchmarks/gpu_device.sh [gpu.py flags]
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS=${PARTS:-/tmp/parts}
SITE=${SITE:-/tmp/site}
if [ ! -d "$SITE/tensorflow" ]; then
    mkdir -p "$SITE.wheels" "$SITE"
    cat "$PARTS"/part* | tar xf - -C "$SITE.wheels"
    ls "$SITE.wheels"/*.whl | xargs -P "$(nproc)" -I{} python3 -m zipfile -e {} "$SITE"
    chmod +x "$SITE"/nvidia/cuda_nvcc/bin/*
    rm -rf "$SITE.wheels"
fi
export PYTHONPATH="$SITE:$PWD/src"
export PATH="$SITE/nvidia/cuda_nvcc/bin:$PATH"
export XLA_FLAGS="--xla_gpu_cuda_data_dir=$SITE/nvidia/cuda_nvcc"
LD_LIBRARY_PATH=$(printf '%s:' "$SITE"/nvidia/*/lib)${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH PYTHONUNBUFFERED=1
exec python3 benchmarks/gpu.py --out "${OUT:?set OUT}" --work /tmp/gpu-work "$@"
