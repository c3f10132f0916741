"""The peak a benchmark is measured against: a CPU's from the text of /proc/cpuinfo (tested
without the hardware), a GPU's from the table of cards; each estimate says how it was made."""

from __future__ import annotations

import pytest

from tfyard.bench.peak import cpu_peak, gpu_peak

ZEN4 = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model name	: AMD EPYC
cpu MHz		: 2596.148
siblings	: 2
cpu cores	: 2
flags		: fpu sse2 avx avx2 fma avx512f avx512_bf16 avx512_vnni

processor	: 1
cpu MHz		: 9999.000
"""
SAPPHIRE_RAPIDS = """processor	: 0
vendor_id	: GenuineIntel
cpu family	: 6
model name	: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz
cpu MHz		: 3800.000
siblings	: 112
cpu cores	: 56
flags		: avx2 fma avx512f avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8
"""
HASWELL = """vendor_id	: GenuineIntel
cpu family	: 6
model name	: Intel(R) Xeon(R) CPU E5-2680 v3 @ 2.50GHz
siblings	: 24
cpu cores	: 12
flags		: avx avx2 fma
"""


@pytest.mark.parametrize("cpuinfo, cpus, dtype, gflops, says", [
    (ZEN4, 2, "float32", 2 * 2.596148 * 32, "AVX-512 FMA as two 256-bit halves"),
    (ZEN4, 2, "bfloat16", 2 * 2.596148 * 64, "avx512_bf16: two products a float32 lane"),
    (ZEN4, 2, "float16", 2 * 2.596148 * 32, "no float16 instructions: computed in float32"),
    (SAPPHIRE_RAPIDS, 8, "bfloat16", 4 * 2.0 * 1024, "amx_bf16 tiles"),
    (SAPPHIRE_RAPIDS, 8, "float32", 4 * 2.0 * 64, "2 AVX-512 FMA units"),
    (HASWELL, 24, "bfloat16", 12 * 2.5 * 32, "no bfloat16 instructions"),
])
def test_a_cpus_peak_is_cores_clock_and_its_widest_multiply_add(cpuinfo, cpus, dtype, gflops,
                                                                says):
    peak = cpu_peak(cpuinfo, cpus, dtype)
    assert peak.flops_per_sec == pytest.approx(gflops * 1e9)
    assert says in peak.how and "core(s) x" in peak.how


def test_a_cpu_without_a_clock_has_no_peak():
    assert cpu_peak("flags : avx2 fma\n", 2, "float32").flops_per_sec is None


@pytest.mark.parametrize("name, dtype, tf32, tflops, says", [
    ("NVIDIA H200", "bfloat16", True, 989, "1 x H200 at 989 TFLOP/s dense BF16"),
    ("NVIDIA H100 PCIe", "bfloat16", True, 756, "H100 PCIe"),
    ("NVIDIA A100-SXM4-80GB", "float32", True, 156, "TF32"),
    ("NVIDIA A100-SXM4-80GB", "float32", False, 19.5, "FP32"),
    ("Tesla T4", "bfloat16", True, 8.1, "FP32 (no bfloat16 units)"),
    ("Tesla V100-SXM2-16GB", "float16", True, 125, "FP16"),
])
def test_a_gpus_peak_comes_from_the_table(name, dtype, tf32, tflops, says):
    peak = gpu_peak(name, 1, dtype, tf32)
    assert peak.flops_per_sec == pytest.approx(tflops * 1e12) and says in peak.how


def test_two_cards_double_it_and_an_unknown_card_says_so():
    assert gpu_peak("NVIDIA L4", 2, "bfloat16", True).flops_per_sec == pytest.approx(242e12)
    unknown = gpu_peak("NVIDIA B200", 1, "bfloat16", True)
    assert unknown.flops_per_sec is None and "not in tfyard's table" in unknown.how
