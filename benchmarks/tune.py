"""`tfyard tune`: ASHA against the exhaustive grid, the study's overhead, parallel trials.

Four parts, each runnable alone (`--parts asha rungs overhead parallel`), all on the bundled
digits with a CIFAR ResNet (`cifar_resnet8`, no XLA: small on purpose), each trial on a
cosine learning rate to 0 at its end, so that its last evaluation (its value) is of a
settled model, not a snapshot at a high rate:

- asha: the grid of learning rate x weight decay x batch size (3 x 3 x 2 = 18 points), every
  point trained to the end (at the digits' own 8x8, 6 epochs), against TPE with Optuna's
  SuccessiveHalvingPruner (`--scheduler asha`) over the grid's ranges (log-uniform learning
  rate and weight decay between the grid's ends, the same batch sizes; not the grid's 18
  choices, of which TPE's first, random, trials repeat points), for 3 study seeds. Prints
  each study's best validation top-1 and the training steps it spent (each trial's last
  step, pruned ones too, summed), then ASHA's mean best against the grid's best and ASHA's
  mean steps as a share of the grid's. A finished trial's accuracy does not depend on the
  machine's load; which trials reach a rung first and the steps a pruned trial runs on
  until tune stops it (tune's reaction, ~0.2 s) do, a little.
- rungs: the study that once pruned at chance level: the learning rate log-uniform over
  [0.001, 0.8], 3 epochs, 8 trials, ASHA at its default first rung (past the first epoch
  and the warm-up), for 5 seeds, against a 3-point learning-rate grid (0.001, 0.028, 0.8)
  at the full budget: no study's best may fall below the grid's worst point. Prints each
  study's best, its steps and where its trials were pruned; `--rung_scheduler median`
  or `none` runs the same studies with another scheduler.
- overhead: a study of 8 trials at --parallel 2, each ~20 s of training (4x --epochs);
  everything outside the trials' own training (process start-up, TensorFlow import, model
  build, study I/O, scheduling) is the 2 slots' time less the trials' own `wall_time_sec`
  (summary.json): 2 x wall time - sum(wall_time_sec), printed in seconds, a trial, and as
  a share of the 2 slots' time. The study's fixed part (the first trials wait for the
  TensorFlow import; the last one's end leaves a slot idle) weighs more the shorter the
  trials: `--overhead_trials 4 --overhead_x 2` is the shape measured before (~10 s trials).
- parallel: one trial using the whole machine against two at --parallel 2 (the cores split
  between them): the summed `mean_images_per_sec` of the two over the one's.
The timing parts (overhead, parallel) train at 16x16 and mean something only on a quiet
machine.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time

GRID = {"learning_rate": {"choice": [0.02, 0.1, 0.4]},
        "weight_decay": {"choice": [0.00001, 0.0001, 0.001]},
        "batch_size": {"choice": [32, 64]}}
RANGES = {name: {"loguniform": [min(entry["choice"]), max(entry["choice"])]}
          if name != "batch_size" else entry for name, entry in GRID.items()}
TRAIN = {"model": "cifar_resnet8", "dataset": "digits", "image_size": 8, "num_gpus": 0,
         "lr_schedule": "cosine", "steps_per_loop": 5, "quiet": True, "jit_compile": False,
         "export": False}
LR_GRID = [0.001, 0.028, 0.8]   # rungs: the grid's points, log-spaced over the range
RUNG_EPOCHS = 3.0
SETTINGS = {"metric": "validation/top1", "mode": "max", "parallel": 2}
TIMED = {"image_size": 16}   # overhead and parallel: more work an image, as measured before


def study(output_dir: str, space: dict, trials: int, epochs: float, **settings) -> dict:
    """Run one study; tune.json's content with the training steps its trials spent and the
    wall time, plus each trial's own summary.json (None for a pruned trial)."""
    import tfyard

    started = time.monotonic()
    summary = tfyard.tune(space=space, trials=trials, output_dir=output_dir, epochs=epochs,
                          **{**SETTINGS, **TRAIN, **settings})
    wall = time.monotonic() - started
    runs = [os.path.join(output_dir, "trials", name)
            for name in sorted(os.listdir(os.path.join(output_dir, "trials")))]
    return {**summary, "wall_s": wall, "steps": sum(map(last_step, runs)),
            "runs": [read_json(os.path.join(run, "summary.json")) for run in runs]}


def last_step(run_dir: str) -> int:
    """The last training step a run reached: its last report in metrics.jsonl."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as stream:
        steps = [json.loads(line)["step"] for line in stream if line.strip()]
    return max(steps, default=0)


def read_json(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path) as stream:
        return json.load(stream)


def asha(root: str, args) -> None:
    grid = None
    if not args.no_grid:
        grid = study(os.path.join(root, "grid"), GRID, 18, args.epochs, sampler="grid", seed=0)
        print(f"grid: 18 points, best validation top-1 {grid['best_value']:.4f} "
              f"({grid['best_params']}), {grid['steps']} training steps, "
              f"{grid['wall_s']:.0f} s", flush=True)
    bests, steps = [], []
    for seed in args.seeds:
        found = study(os.path.join(root, f"asha-{seed}"), RANGES, args.asha_trials, args.epochs,
                      scheduler="asha", seed=seed)
        bests.append(found["best_value"])
        steps.append(found["steps"])
        print(f"asha seed {seed}: {args.asha_trials} trials ({found['trials']['pruned']} "
              f"pruned), best {found['best_value']:.4f} ({found['best_params']}), "
              f"{found['steps']} steps, {found['wall_s']:.0f} s", flush=True)
    if grid is None:
        return
    gap = 100 * (grid["best_value"] - statistics.mean(bests))
    share = statistics.mean(steps) / grid["steps"]
    print(f"asha: mean best {statistics.mean(bests):.4f} over seeds {args.seeds}, "
          f"{gap:+.2f} points below the grid's best {grid['best_value']:.4f} (bound 0.5); "
          f"mean steps {statistics.mean(steps):.0f} = {share:.1%} of the grid's "
          f"{grid['steps']} (bound 35 %)", flush=True)


def rungs(root: str, args) -> None:
    grid = study(os.path.join(root, "lr-grid"), {"learning_rate": {"choice": LR_GRID}}, 3,
                 RUNG_EPOCHS, sampler="grid", seed=0)
    values = sorted(trial_values(os.path.join(root, "lr-grid")))
    print(f"rungs: the 3-point grid {LR_GRID} ends at {', '.join(f'{v:.4f}' for v in values)}",
          flush=True)
    bests = []
    for seed in args.rung_seeds:
        place = os.path.join(root, f"rungs-{seed}")
        found = study(place, {"learning_rate": {"loguniform": [0.001, 0.8]}}, 8, RUNG_EPOCHS,
                      scheduler=args.rung_scheduler, seed=seed,
                      **({"min_resource": args.min_resource} if args.min_resource else {}))
        bests.append(found["best_value"])
        print(f"rungs seed {seed}: best {found['best_value']:.4f} "
              f"({found['best_params']}), {found['steps']} steps, {found['trials']['pruned']} "
              f"of 8 pruned, at evaluation(s) {sorted(pruned_at(place))}", flush=True)
    held = all(best >= values[0] for best in bests)
    print(f"rungs: worst best {min(bests):.4f} over seeds {args.rung_seeds} against the grid's "
          f"worst point {values[0]:.4f}: {'held' if held else 'NOT held'} (grid "
          f"{grid['best_value']:.4f} at best)", flush=True)


def trial_values(output_dir: str) -> list[float]:
    """The finished trials' values of a study (trials.csv)."""
    with open(os.path.join(output_dir, "trials.csv")) as stream:
        rows = list(csv.DictReader(stream))
    return [float(row["value"]) for row in rows if row["state"] == "complete"]


def pruned_at(output_dir: str) -> list[int]:
    """The evaluation at which each pruned trial of a study was pruned (Optuna's steps)."""
    import optuna

    study = optuna.load_study(study_name=os.path.basename(output_dir),
                              storage=f"sqlite:///{output_dir}/study.db")
    return [max(t.intermediate_values) for t in study.trials if t.state.name == "PRUNED"]


def overhead(root: str, args) -> None:
    space = {"learning_rate": {"loguniform": [0.02, 0.4]}}
    trials = args.overhead_trials
    found = study(os.path.join(root, "overhead"), space, trials, args.epochs * args.overhead_x,
                  seed=0, **TIMED)
    trained = sum(run["wall_time_sec"] for run in found["runs"])
    outside = SETTINGS["parallel"] * found["wall_s"] - trained
    print(f"overhead: {trials} trials at --parallel 2 in {found['wall_s']:.1f} s, their own "
          f"training {trained:.1f} s ({trained / trials:.1f} s a trial); outside training "
          f"{outside:.1f} s of the 2 slots' time, {outside / trials:.2f} s a trial: "
          f"{outside / (SETTINGS['parallel'] * found['wall_s']):.1%} of the wall time "
          "(bound 10 %)", flush=True)


def parallel(root: str, args) -> None:
    space = {"learning_rate": 0.1}
    one = study(os.path.join(root, "one"), space, 1, args.epochs * 2, parallel=1, seed=0,
                **TIMED)
    two = study(os.path.join(root, "two"), {"learning_rate": {"choice": [0.1, 0.1001]}}, 2,
                args.epochs * 2, sampler="grid", seed=0, **TIMED)
    alone = one["runs"][0]["mean_images_per_sec"]
    shared = sum(run["mean_images_per_sec"] for run in two["runs"])
    print(f"parallel: one trial on the whole machine {alone:.0f} images/s; two at "
          f"--parallel 2 {shared:.0f} images/s together; {shared / alone:.2f}x (bound 0.9x)",
          flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("asha", "rungs", "overhead", "parallel"),
                        default=["asha", "rungs", "overhead", "parallel"])
    parser.add_argument("--epochs", type=float, default=6.0,
                        help="each trial's epochs (asha); parallel trains twice as long, "
                        "overhead --overhead_x times")
    parser.add_argument("--asha_trials", type=int, default=10, help="trials an ASHA study runs")
    parser.add_argument("--overhead_trials", type=int, default=8,
                        help="trials of the overhead study")
    parser.add_argument("--overhead_x", type=float, default=4.0,
                        help="overhead: each trial trains this many times --epochs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                        help="ASHA study seeds")
    parser.add_argument("--rung_seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5],
                        help="rungs: the study seeds")
    parser.add_argument("--min_resource", type=float, help="rungs: the studies' first "
                        "rung in epochs (default: tune's, past the first epoch); 0.3, the "
                        "first evaluation, prunes as tune did before")
    parser.add_argument("--rung_scheduler", default="asha", choices=("asha", "median", "none"),
                        help="rungs: the studies' scheduler (which fits a slow learner's budget)")
    parser.add_argument("--no_grid", action="store_true", help="asha: the ASHA studies "
                        "alone (seeds run side by side in several processes; compare by hand)")
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    with tempfile.TemporaryDirectory(prefix="tfyard-bench-tune-") as root:
        parts = {"asha": asha, "rungs": rungs, "overhead": overhead, "parallel": parallel}
        for part, measure in parts.items():
            if part in args.parts:
                measure(root, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
