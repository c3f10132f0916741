"""Training with MLflow tracking on against tracking off, in one run.

Starts `mlflow server` on 127.0.0.1 (SQLite store; it shares this machine's cores, as a
server on the same node would), then trains the same `tfyard train` flags untracked and
tracked, alternated, and compares each run's `mean_images_per_sec`. Tracked runs log their
params at the start, every report's metrics through the background queue, and run.json,
summary.json and the export as a model at the end (outside the timed steps).

Prints each rate and the ratio of the best tracked to the best untracked run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from loopback import free_port, serve, stop

TRAIN = ["--model", "cifar_resnet20", "--dataset", "digits", "--num_gpus", "0", "--seed", "1",
         "--quiet", "--steps_per_loop", "5"]


def start_server(root: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    return serve([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port",
                  str(port), "--workers", "1", "--backend-store-uri", f"sqlite:///{root}/runs.db",
                  "--artifacts-destination", os.path.join(root, "artifacts")], port,
                 {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})   # as the tests


def train_rate(output_dir: str, steps: int, uri: str | None) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    if uri:
        env.update(MLFLOW_TRACKING_URI=uri, MLFLOW_EXPERIMENT_NAME="bench")
    subprocess.run([sys.executable, "-m", "tfyard", "train", *TRAIN, "--train_steps",
                    str(steps), "--output_dir", output_dir], check=True, env=env)
    with open(os.path.join(output_dir, "summary.json")) as handle:
        return json.load(handle)["mean_images_per_sec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train_steps", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2, help="training runs of each kind")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-") as root:
        server, uri = start_server(root)
        try:
            plain, tracked = [], []
            for round_ in range(args.rounds):   # alternated: drift on a shared machine
                plain.append(train_rate(os.path.join(root, f"plain{round_}"),
                                        args.train_steps, None))
                tracked.append(train_rate(os.path.join(root, f"tracked{round_}"),
                                          args.train_steps, uri))
        finally:
            stop(server)
    off, on = max(plain), max(tracked)
    print(f"training {args.train_steps} steps, a report every 5 (best of {args.rounds}): "
          f"tracking off {off:.0f} images/s ({', '.join(f'{r:.0f}' for r in plain)}), "
          f"tracking on {on:.0f} images/s ({', '.join(f'{r:.0f}' for r in tracked)}); "
          f"ratio {on / off:.3f}x")


if __name__ == "__main__":
    main()
