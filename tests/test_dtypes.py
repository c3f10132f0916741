"""The `--dtype` list is declared once, in tfyard.dtypes, and every dtype has a policy; what
`--dtype auto` picks from a CPU's flags and from GPUs' compute capabilities, without them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tfyard
from tfyard.dtypes import (
    DTYPES,
    Choice,
    cpu_flags,
    disagreement,
    for_cpu,
    for_gpus,
    recorded,
)
from tfyard.models.factory import policy_name

PACKAGE = Path(tfyard.__file__).parent


def _lists_of_all_dtypes(path: Path) -> list[int]:
    """Lines of `path` that spell out the whole dtype list again."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Tuple | ast.List | ast.Set)
            and {getattr(e, "value", None) for e in node.elts} >= set(DTYPES)]


def test_only_tfyard_dtypes_spells_out_the_dtype_list():
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := _lists_of_all_dtypes(path))}
    assert set(found) == {"dtypes.py"}, f"import DTYPES from tfyard.dtypes instead: {found}"


def test_every_dtype_has_a_keras_policy():
    assert [policy_name(dtype) for dtype in DTYPES] == \
        ["float32", "mixed_bfloat16", "mixed_float16"]


ZEN4 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model name	: AMD EPYC
flags		: fpu sse2 avx avx2 fma avx512f avx512_bf16 avx512_vnni
"""


@pytest.mark.parametrize("flags, onednn, dtype, says", [
    ("avx2 fma avx512f avx512_bf16 avx512_vnni", True, "bfloat16", "natively (avx512_bf16)"),
    ("avx512f avx512_bf16 amx_tile amx_bf16 amx_int8", True, "bfloat16", "(amx_bf16)"),
    ("avx2 fma avx512f avx512_vnni", True, "float32", "no bfloat16 instructions"),
    ("avx2 fma", True, "float32", "(amx_bf16 or avx512_bf16)"),
    ("avx512f avx512_bf16", False, "float32", "oneDNN kernels are off"),
])
def test_auto_on_a_cpu_follows_its_flags(flags, onednn, dtype, says):
    choice = for_cpu(cpu_flags(f"processor : 0\nflags : {flags}\n"), onednn)
    assert choice.dtype == dtype and says in choice.reason
    assert choice.reason.startswith("auto: ")


def test_cpu_flags_are_the_first_processors():
    assert "avx512_bf16" in cpu_flags(ZEN4) and "amx_bf16" not in cpu_flags(ZEN4)
    assert cpu_flags("") == frozenset()


@pytest.mark.parametrize("gpus, dtype, says", [
    ([("NVIDIA H200", (9, 0))], "bfloat16", "NVIDIA H200 computes bfloat16 natively"),
    ([("NVIDIA A100-SXM4-80GB", (8, 0))], "bfloat16", "compute capability 8.0"),
    ([("NVIDIA L4", (8, 9)), ("Tesla T4", (7, 5))], "float32", "Tesla T4 has no bfloat16"),
    ([("Tesla V100-SXM2-16GB", (7, 0))], "float32", "compute capability 7.0 < 8.0"),
])
def test_auto_on_gpus_needs_compute_capability_8_on_every_one(gpus, dtype, says):
    choice = for_gpus(gpus)
    assert choice.dtype == dtype and says in choice.reason


def test_members_that_resolve_auto_otherwise_are_refused_in_one_line():
    chief, worker = for_cpu(frozenset({"avx512_bf16"})), for_cpu(frozenset({"avx2"}))
    assert disagreement(chief, for_cpu(frozenset({"amx_bf16"})), "worker 1") is None
    line = disagreement(chief, worker, "worker 1")
    assert "\n" not in line
    assert line.startswith("--dtype auto: worker 1 resolves float32 (this CPU has no bfloat16")
    assert "the chief resolved bfloat16" in line and "--dtype float32" in line


def test_a_resume_keeps_what_run_json_recorded():
    assert recorded("float16") == Choice("float16", "auto: as run.json recorded at the run's "
                                         "first start")
