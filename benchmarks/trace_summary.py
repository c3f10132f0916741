"""Where the time of a profiled run goes: a text summary of a TensorFlow profiler trace.

`tfyard train --profile_steps A,B` (or `tfyard bench train --profile DIR`) writes a trace
that TensorBoard's Profile tab shows; this reads the same `*.xplane.pb` without TensorBoard:
for each group of host threads (tf.data, the step's compute, the Python thread, ...), its
busy time, and the op types (or with --ops the single ops) with the most self time (time
not spent in a nested event).

    python benchmarks/trace_summary.py OUTPUT_DIR/logs/train [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402

# thread-name pattern -> group; the first match wins
GROUPS = (("tf_data", r"tf_data|tf\.data|data_private|iterator"),
          ("python", r"^python|MainThread|tf_Compute$"),
          ("compute", r"Eigen|tf_Compute|inter_op|intra_op|xla|XLA|cpu"),)


def group_of(thread: str) -> str:
    for group, pattern in GROUPS:
        if re.search(pattern, thread):
            return group
    return "other"


def self_times(events, meta) -> collections.Counter:
    """Self time (ps) per event name on one thread: each event's duration minus the
    durations of the events nested directly inside it."""
    def name(i):
        return meta[i].name if i in meta else str(i)

    spans = sorted(((e.offset_ps, e.offset_ps + e.duration_ps, name(e.metadata_id))
                    for e in events), key=lambda s: (s[0], -s[1]))
    totals, stack = collections.Counter(), []   # stack of [end, name, child time]
    for start, end, name in spans:
        while stack and stack[-1][0] <= start:
            closing = stack.pop()
            totals[closing[1]] -= closing[2]
        if stack:
            stack[-1][2] += end - start
        totals[name] += end - start
        stack.append([end, name, 0])
    for closing in stack:
        totals[closing[1]] -= closing[2]
    return totals


def summarise(path: str, top: int, by_type: bool) -> None:
    space = xplane_pb2.XSpace()
    with open(path, "rb") as handle:
        space.ParseFromString(handle.read())
    for plane in space.planes:
        if not plane.lines or not plane.name.startswith("/host"):
            continue
        meta = plane.event_metadata
        busy, by_group = collections.Counter(), collections.defaultdict(collections.Counter)
        span = [None, 0]
        for line in plane.lines:
            if not line.events:
                continue
            group = group_of(line.name)
            times = self_times(line.events, meta)
            if by_type:   # TensorFlow names op events "name:Type"
                types = collections.Counter()
                for name, time_ps in times.items():
                    op, _, kind = name.rpartition(":")
                    types[kind if op and not op.endswith(":") else name] += time_ps
                times = types
            by_group[group].update(times)
            busy[group] += sum(times.values())
            first = line.timestamp_ns * 1000 + min(e.offset_ps for e in line.events)
            last = line.timestamp_ns * 1000 + max(e.offset_ps + e.duration_ps
                                                  for e in line.events)
            span = [first if span[0] is None else min(span[0], first), max(span[1], last)]
        wall = (span[1] - span[0]) / 1e12 if span[0] is not None else 0.0
        print(f"{plane.name}: {wall:.2f} s traced")
        for group, total in busy.most_common():
            print(f"  {group:<8} busy {total / 1e12:8.2f} s ({total / 1e12 / max(wall, 1e-9):.0%}"
                  " of the wall time, summed over its threads)")
            for name, time_ps in by_group[group].most_common(top):
                print(f"      {time_ps / 1e12:8.3f} s  {name[:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logdir", help="the directory the profiler wrote (its plugins/profile "
                        "folder is searched)")
    parser.add_argument("--top", type=int, default=12, help="events listed per thread group")
    parser.add_argument("--ops", action="store_true",
                        help="list single ops by name instead of summing them by op type")
    args = parser.parse_args()
    found = sorted(glob.glob(os.path.join(args.logdir, "**", "*.xplane.pb"), recursive=True),
                   key=os.path.getmtime)
    if not found:
        parser.error(f"no *.xplane.pb under {args.logdir}")
    summarise(found[-1], args.top, by_type=not args.ops)


if __name__ == "__main__":
    main()
