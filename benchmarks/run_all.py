"""`make bench`: every CPU benchmark in turn, after the start-up check.

Each benchmark prints its own ratio against a baseline measured in the same run; this
script only runs them and checks `tfyard --help` against its 0.5 s budget.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = ("input_pipeline.py", "data_verify.py", "train_step.py", "end_to_end.py",
              "user_model.py", "fine_tune.py", "scaling.py", "object_storage.py",
              "tracking.py", "iterator_release.py")
HELP_BUDGET_S = 0.5


def help_seconds(runs: int = 5) -> float:
    """Median wall time of `python -m tfyard --help`, interpreter start included."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tfyard", "--help"], check=True,
                       stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    seconds = help_seconds()
    ok = seconds < HELP_BUDGET_S
    print(f"== start-up: `tfyard --help` {seconds:.3f} s (median of 5), budget "
          f"{HELP_BUDGET_S} s: {'ok' if ok else 'OVER'}", flush=True)
    for name in BENCHMARKS:
        print(f"== {name}", flush=True)
        code = subprocess.run([sys.executable, os.path.join(HERE, name)], env=env).returncode
        if code:
            print(f"== {name} failed with exit code {code}", flush=True)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
