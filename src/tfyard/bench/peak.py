"""The device's peak FLOP/s in a dtype, estimated, each estimate saying how it was made: a
benchmark's achieved FLOP/s means little without it.

A CPU's from its instruction sets, cores and clock (pure functions of /proc/cpuinfo's text,
tested without the hardware); a GPU's from a table of known cards' dense (no sparsity)
tensor-core figures from their makers' data sheets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tfyard.dtypes import cpuinfo
from tfyard.process.cpus import usable_cpus

# card (matched in this order within TensorFlow's name) -> dense TFLOP/s: bfloat16,
# float16, TF32 (what TensorFlow runs float32 convolutions and matmuls in on Ampere and
# later), float32 without tensor cores. None: no such units (computed in float32).
GPU_TFLOPS = (
    ("H200", (989.0, 989.0, 494.5, 67.0)),
    ("H100 PCIe", (756.0, 756.0, 378.0, 51.0)),
    ("H100", (989.0, 989.0, 494.5, 67.0)),
    ("A100", (312.0, 312.0, 156.0, 19.5)),
    ("L40S", (362.0, 362.0, 183.0, 91.6)),
    ("L40", (181.0, 181.0, 90.5, 90.5)),
    ("A10", (125.0, 125.0, 62.5, 31.2)),
    ("L4", (121.0, 121.0, 60.0, 30.3)),
    ("V100", (None, 125.0, None, 15.7)),
    ("T4", (None, 65.0, None, 8.1)),
)
_COLUMN = {"bfloat16": 0, "float16": 1}


@dataclass(frozen=True)
class Peak:
    """A device's peak in one dtype (None: unknown) and how it was estimated."""

    flops_per_sec: float | None
    how: str


def _fields(cpuinfo: str) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo's text."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break   # the blank line after the first processor
            continue
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_peak(cpuinfo: str, logical_cpus: int, dtype: str) -> Peak:
    """Peak of `logical_cpus` of the CPU `cpuinfo` describes: physical cores x clock x FLOPs a
    cycle of the widest multiply-add its flags name for `dtype` (two FMA units a core)."""
    fields = _fields(cpuinfo)
    flags = set(fields.get("flags", "").split())
    threads = max(1, int(fields.get("siblings", 1)) // max(1, int(fields.get("cpu cores", 1))))
    cores = max(1, logical_cpus // threads)
    named = re.search(r"@\s*([\d.]+)\s*GHz", fields.get("model name", ""))
    ghz = float(named.group(1)) if named else float(fields.get("cpu MHz", 0)) / 1000
    clock = "the model name's clock" if named else "cpuinfo's current clock"
    if not ghz:
        return Peak(None, "cpuinfo names no clock")
    per_cycle, unit = _per_cycle(flags, fields.get("vendor_id", ""),
                                 int(fields.get("cpu family", 0) or 0), dtype)
    return Peak(cores * ghz * 1e9 * per_cycle,
                f"{cores} core(s) x {ghz:.2f} GHz ({clock}) x {per_cycle} {dtype} FLOP/cycle "
                f"({unit})")


def _per_cycle(flags: set[str], vendor: str, family: int, dtype: str) -> tuple[int, str]:
    """FLOPs a core issues each cycle in `dtype`, and the units that issue them."""
    amx = {"bfloat16": "amx_bf16", "float16": "amx_fp16"}.get(dtype)
    if amx in flags:
        return 1024, f"{amx} tiles"
    if "avx512f" in flags:
        halves = vendor == "AuthenticAMD" and family < 26   # Zen 4 splits 512-bit ops in two
        fp32, unit = (32, "AVX-512 FMA as two 256-bit halves") if halves \
            else (64, "2 AVX-512 FMA units")
    elif "avx2" in flags and "fma" in flags:
        fp32, unit = 32, "2 AVX2 FMA units"
    else:
        fp32, unit = 8, "SSE, no FMA"
    pairs = {"bfloat16": "avx512_bf16", "float16": "avx512_fp16"}.get(dtype)
    if pairs in flags:
        return 2 * fp32, f"{pairs}: two products a float32 lane, {unit}"
    if dtype != "float32":
        return fp32, f"no {dtype} instructions: computed in float32, {unit}"
    return fp32, unit


def gpu_peak(name: str, count: int, dtype: str, tf32: bool) -> Peak:
    """Peak of `count` cards named `name` from GPU_TFLOPS; None for a card not listed."""
    for card, tflops in GPU_TFLOPS:
        if card in name:
            column = _COLUMN.get(dtype, 2 if tf32 and tflops[2] else 3)
            value, kind = tflops[column], ("BF16", "FP16", "TF32", "FP32")[column]
            if value is None:
                value, kind = tflops[3], f"FP32 (no {dtype} units)"
            return Peak(count * value * 1e12, f"{count} x {card} at {value:g} TFLOP/s dense "
                        f"{kind}, from the data sheet")
    return Peak(None, f"{name} is not in tfyard's table of cards "
                f"({', '.join(card for card, _ in GPU_TFLOPS)})")


def this_machine(cards: list[tuple[str, tuple[int, int]]], dtype: str) -> Peak:
    """The peak of the GPUs `cards` (`distribute.devices.gpu_cards`), else of this
    process's CPUs."""
    if cards:
        import tensorflow as tf

        return gpu_peak(cards[0][0], len(cards), dtype,
                        tf.config.experimental.tensor_float_32_execution_enabled())
    return cpu_peak(cpuinfo(), len(usable_cpus()), dtype)
