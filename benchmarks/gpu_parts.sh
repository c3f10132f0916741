#!/usr/bin/env bash
# The parts that carry TensorFlow to a lent GPU machine (Python 3.12, no registry, no
# TensorFlow): the wheels of `tensorflow[and-cuda]`, keras, and optuna with what it needs
# (for `tfyard tune` there), as one tar split into parts of at most 61 MiB, each small enough
# to travel with the working tree in one call. benchmarks/gpu_device.sh joins and unpacks them.
#   bash benchmarks/gpu_parts.sh [DIR]     (default .gpu, which .git/info/exclude should name)
# Left out, to save transfer (~0.6 GB), none of them loaded by one GPU: NCCL (loaded at the
# first NCCL call; tfyard's all-reduce on one card never calls it), cuDNN's RNN/attention
# library, cuSOLVER's multi-GPU library, NVRTC's second copy, and libclang (TensorFlow's
# build tools), with setuptools and wheel, which the machine has.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.gpu}
mkdir -p "$DIR/whl" "$DIR/parts"
python3 -m pip download --quiet --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$DIR/whl" \
    'tensorflow[and-cuda]>=2.21,<2.22' 'keras>=3.12,<3.16' 'optuna>=4'
rm -f "$DIR"/whl/nvidia_nccl_cu12-*.whl "$DIR"/whl/libclang-*.whl \
    "$DIR"/whl/setuptools-*.whl "$DIR"/whl/wheel-*.whl
python3 - "$DIR/whl" <<'EOF'
"""Rewrites the wheels that hold a library one GPU never loads, without it."""
import glob, os, sys, zipfile
UNUSED = ("/libcudnn_adv.so", "/libcusolverMg.so", "/libnvrtc.alt.so")
for wheel in glob.glob(os.path.join(sys.argv[1], "nvidia_*.whl")):
    with zipfile.ZipFile(wheel) as source:
        kept = [i for i in source.infolist() if not any(u in i.filename for u in UNUSED)]
        if len(kept) == len(source.infolist()):
            continue
        with zipfile.ZipFile(wheel + ".new", "w") as target:
            for info in kept:
                target.writestr(info, source.read(info), compress_type=info.compress_type)
    os.replace(wheel + ".new", wheel)
EOF
rm -f "$DIR"/parts/part*
tar -C "$DIR/whl" -cf - . | split -b 61M -d -a 2 - "$DIR/parts/part"
ls "$DIR/parts" | wc -l
