"""Which dtype a run computes in (`--dtype`): the choices, declared once for the options, the
input pipeline and the models (`tfyard.models.factory.policy_name` maps each to its Keras
policy), and what `auto` means on this machine: bfloat16 where the hardware computes it
natively, float32 elsewhere, since emulated bfloat16 is slower than float32.

The rules are pure functions of what the hardware says (CPU flags, GPU compute capabilities),
so they are tested without the hardware. No tfyard imports: any layer may use it.
"""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("float32", "bfloat16", "float16")
AUTO = "auto"
CHOICES = (*DTYPES, AUTO)
# The /proc/cpuinfo flags of instructions that multiply bfloat16 (oneDNN's kernels use them).
CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")
GPU_BF16_CAPABILITY = (8, 0)   # Ampere: the first NVIDIA tensor cores with bfloat16
ASKED = "as --dtype asked"   # the reason for a dtype given outright


@dataclass(frozen=True)
class Choice:
    """The dtype a run computes in and why, said on the run's first line."""

    dtype: str
    reason: str


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The instruction-set flags of the first processor in /proc/cpuinfo's text."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return frozenset()


def for_cpu(flags: frozenset[str], onednn: bool = True) -> Choice:
    """`auto` on a CPU: bfloat16 with AMX or AVX512_BF16 and TensorFlow's oneDNN kernels
    (without them TensorFlow emulates bfloat16), else float32."""
    native = [flag for flag in CPU_BF16_FLAGS if flag in flags]
    if not native:
        return Choice("float32", "auto: this CPU has no bfloat16 instructions "
                      f"({' or '.join(CPU_BF16_FLAGS)})")
    if not onednn:
        return Choice("float32", f"auto: this CPU has {native[0]}, but TensorFlow's oneDNN "
                      "kernels are off (TF_ENABLE_ONEDNN_OPTS=0)")
    return Choice("bfloat16", f"auto: this CPU computes bfloat16 natively ({native[0]})")


def for_gpus(gpus: list[tuple[str, tuple[int, int]]]) -> Choice:
    """`auto` on GPUs, each (name, compute capability): bfloat16 when every one has
    compute capability 8.0 or more (Ampere and later), else float32."""
    name, capability = min(gpus, key=lambda gpu: gpu[1])
    spelled = ".".join(map(str, capability))
    if capability >= GPU_BF16_CAPABILITY:
        return Choice("bfloat16", f"auto: {name} computes bfloat16 natively (compute "
                      f"capability {spelled})")
    return Choice("float32", f"auto: {name} has no bfloat16 tensor cores (compute capability "
                  f"{spelled} < 8.0)")


def cpuinfo(path: str = "/proc/cpuinfo") -> str:
    """The text of /proc/cpuinfo ("" where there is none: not Linux)."""
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def for_this_machine(gpus: list[tuple[str, tuple[int, int]]], onednn: bool) -> Choice:
    """`auto` for the devices a process trains on: its GPUs (name, compute capability), else
    its CPU (`onednn`: whether TensorFlow runs oneDNN's kernels)."""
    return for_gpus(gpus) if gpus else for_cpu(cpu_flags(cpuinfo()), onednn)


def recorded(dtype: str) -> Choice:
    """`auto` on a resume: the dtype the run's first start resolved, which its checkpoints
    hold, whatever this machine would pick."""
    return Choice(dtype, "auto: as run.json recorded at the run's first start")


def disagreement(chief: Choice, own: Choice, member: str) -> str | None:
    """The one line refusing a member whose hardware resolves `auto` otherwise than the
    chief's (an all-reduce sums one dtype), or None when they agree."""
    if chief.dtype == own.dtype:
        return None
    return (f"--dtype auto: {member} resolves {own.dtype} ({own.reason.removeprefix('auto: ')})"
            f" but the chief resolved {chief.dtype} ({chief.reason.removeprefix('auto: ')}); "
            "an all-reduce needs one dtype: give every member --dtype float32 or --dtype "
            f"{chief.dtype}")
