"""Where a CPU step's oneDNN time goes: `ONEDNN_VERBOSE=1` lines summed by primitive, its
implementation (the instruction set oneDNN picked: `avx512_core_bf16`, `avx512_core_amx` ...),
direction and source dtype (issue 66).

    ONEDNN_VERBOSE=1 tfyard bench train --model resnet50 --dtype bfloat16 ... > verbose.txt
    python benchmarks/onednn_summary.py verbose.txt [--skip_ms 0]

Every `exec` line counts (warm-up included unless `--skip_execs` drops the first N).
"""

from __future__ import annotations

import argparse
import collections


def parse(lines, skip: int) -> tuple[collections.Counter, collections.Counter]:
    """(ms, calls) by (primitive, implementation, direction, source dtype)."""
    ms, calls, seen = collections.Counter(), collections.Counter(), 0
    for line in lines:
        fields = line.rstrip("\n").split(",")
        if not line.startswith("onednn_verbose") or "exec" not in fields[:4]:
            continue
        seen += 1
        if seen <= skip:
            continue
        at = fields.index("exec")
        primitive, implementation, direction = fields[at + 2:at + 5]
        source = next((f.split(":")[1] for f in fields if f.startswith(("src:", "data:"))
                       and ":" in f), "?")
        key = (primitive, implementation, direction, source)
        ms[key] += float(fields[-1])
        calls[key] += 1
    return ms, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verbose", help="a file of ONEDNN_VERBOSE=1 output")
    parser.add_argument("--skip_execs", type=int, default=0, help="exec lines not counted")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    with open(args.verbose, errors="replace") as handle:
        ms, calls = parse(handle, args.skip_execs)
    total = sum(ms.values())
    print(f"{total / 1000:.2f} s in {sum(calls.values())} oneDNN calls")
    for key, value in ms.most_common(args.top):
        print(f"  {value / 1000:7.2f} s {value / total:6.1%} {calls[key]:6d}x  {' '.join(key)}")
    kinds = collections.Counter()
    for (primitive, *_), value in ms.items():
        kinds[primitive] += value
    print("by primitive: " + ", ".join(f"{k} {v / total:.0%}" for k, v in kinds.most_common()))


if __name__ == "__main__":
    main()
