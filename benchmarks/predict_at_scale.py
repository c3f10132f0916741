"""`tfyard predict --on spark|ray` against a local `tfyard predict` on the same files (issue 32).

Photos (default): the 1,500 JPEGs of 1024x768 and the `mobilenet_v1_025` run that
`benchmarks/predict.py` writes (its `--work` directory is reused when given). Each side is one
whole process, parquet out, the sides taking turns round after round as in predict.py:
- `local`: `tfyard predict --output_dir RUN DIR --output local.parquet`;
- `spark`: `... --on spark --master local[2] --output spark/` (a local Spark, 2 workers);
- `ray`: `... --on ray --workers 2 --output ray/` (a local Ray, 2 actors).
Reported: images/sec from each process's wall time (engine start included) and from its
final line (the job alone), the ratio to local (target >= 0.8), and the peak RSS of the
process tree (driver, JVM or Ray's processes, every worker), sampled every 0.2 s.

`--copies K` scores every photo K times over (hard links in a folder beside them), so the
engines' fixed start-up weighs less; comparing the rates at K=1 and K=4 gives the marginal
rate of each side, start-up excluded.

`--small_files N` is the memory check: N JPEGs of 32x24 and a `cifar_resnet20` run at
32 px, each side once, the same figures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from predict import train_run, write_photos  # noqa: E402

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Bytes resident in `root` and all its descendants now."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(parent, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as statm:
                total += int(statm.read().split()[1]) * PAGE
        except OSError:
            pass
    return total


def measured(command: list[str]) -> dict:
    """Wall seconds, the final line's seconds and the peak RSS of one whole process."""
    start = time.monotonic()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    peak = [0]

    def sample():
        while proc.poll() is None:
            peak[0] = max(peak[0], tree_rss(proc.pid))
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    sampler.join()
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{err[-3000:]}")
    line = [text for text in err.splitlines() if text.startswith("tfyard: predicted")][-1]
    return {"wall": time.monotonic() - start, "job": float(re.search(r" in ([\d.]+)s", line)[1]),
            "peak_rss_mb": peak[0] / 2**20}


def sides(run: str, data: str, work: str) -> dict[str, list[str]]:
    base = [sys.executable, "-m", "tfyard", "predict", "--output_dir", run, data]
    return {"local": [*base, "--output", os.path.join(work, "local.parquet")],
            "spark": [*base, "--on", "spark", "--master", "local[2]",
                      "--output", os.path.join(work, "spark")],
            "ray": [*base, "--on", "ray", "--workers", "2", "--output", os.path.join(work, "ray")]}


def small_files(root: str, count: int) -> None:
    """`count` 32x24 JPEGs of two noisy colours, in two class folders."""
    import numpy as np
    from PIL import Image

    rng = np.random.RandomState(0)
    for i in range(count):
        folder = os.path.join(root, f"class{i % 2}")
        os.makedirs(folder, exist_ok=True)
        pixels = np.array([(200, 30, 30), (30, 30, 200)][i % 2]) + rng.randint(-50, 50,
                                                                              (24, 32, 3))
        Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).save(
            os.path.join(folder, f"{i:06d}.jpg"), quality=90)


def copied(data: str, copies: int) -> str:
    """A folder beside `data` holding each of its images `copies` times, as hard links."""
    folder = f"{data}-x{copies}"
    if not os.path.isdir(folder):
        for root, _, files in os.walk(data):
            target = os.path.join(folder, os.path.relpath(root, data))
            os.makedirs(target, exist_ok=True)
            for name in files:
                for copy in range(copies):
                    os.link(os.path.join(root, name), os.path.join(target, f"{copy}-{name}"))
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--copies", type=int, default=1,
                        help="score each photo this many times over (hard links)")
    parser.add_argument("--small_files", type=int, default=0,
                        help="the memory check instead: this many 32x24 JPEGs, one round")
    parser.add_argument("--sides", default="local,spark,ray",
                        help="which to run, comma-separated (default: all three)")
    parser.add_argument("--work", help="reuse this directory (default: a temporary one)")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="predict-scale-bench-")
    data, run = os.path.join(work, "photos"), os.path.join(work, "run")
    count, rounds = (args.small_files, 1) if args.small_files else (args.images, args.rounds)
    if not os.path.isdir(data):
        (small_files if args.small_files else write_photos)(data, count)
    if not os.path.isdir(os.path.join(run, "export")):
        train_run(data, run, *(("cifar_resnet20", "--image_size", "32") if args.small_files
                               else ("mobilenet_v1_025",)))
    if args.copies > 1:
        data, count = copied(data, args.copies), count * args.copies
    out = tempfile.mkdtemp(prefix="outputs-", dir=work)
    commands = {side: command for side, command in sides(run, data, out).items()
                if side in args.sides.split(",")}
    figures: dict[str, list[dict]] = {side: [] for side in commands}
    for round_number in range(rounds):
        order = list(commands)[round_number % 3:] + list(commands)[:round_number % 3]
        for side in order:
            figures[side].append(measured(commands[side]))
            print(f"round {round_number + 1} {side}: {json.dumps(figures[side][-1])}",
                  flush=True)

    def rate(side: str, key: str) -> float:
        return count / statistics.median(f[key] for f in figures[side])

    result = {"images": count, "rounds": rounds, "sides": {side: {
        "wall_images_per_sec": round(rate(side, "wall"), 1),
        "job_images_per_sec": round(rate(side, "job"), 1),
        **({"over_local_wall": round(rate(side, "wall") / rate("local", "wall"), 2),
            "over_local_job": round(rate(side, "job") / rate("local", "job"), 2)}
           if "local" in figures else {}),
        "peak_rss_mb": round(max(f["peak_rss_mb"] for f in figures[side]))}
        for side in commands}}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
