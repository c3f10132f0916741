"""`tfyard tune`: a hyperparameter search over ordinary `tfyard train` runs.

A study is a set of runs (`DIR/trials/NNNN`) plus its record in Optuna's storage; the
samplers and pruners are Optuna's, the trials are train processes this room starts, watches
and stops. It sits above `train` (it drives runs) and `launch` (whose process groups it
reuses), and imports Optuna only when a search runs.

`tfyard.tune` is both this package and the function `tune`, the Python door to `tfyard
tune`: the CLI parses its flags and calls it.
"""

from __future__ import annotations

from tfyard import callable_package


def tune(model=None, data=None, *, space, metric: str, mode: str, trials: int,
         output_dir: str, parallel: int = 1, sampler: str = "tpe", scheduler: str = "none",
         pbt_interval: int | None = None, storage: str | None = None,
         study_name: str | None = None, seed: int | None = None, timeout: float | None = None,
         max_failures: int = 2, on: str = "local", address: str | None = None,
         workers: int = 1, cpus_per_member: float = 1.0, gpus_per_member: float = 0.0,
         train_argv=(), **options) -> dict:
    """Run (or continue) the study `tfyard tune` runs with the same settings, and return its
    summary (tune.json's content). Every wrong input is a UserError, worded as the CLI's.

    Args:
        model: a registry name, `"module:function"`, or a module-level function (each trial
            is a process of its own and imports it again by name); None: train's default
            or the space's `model`.
        data: likewise for the dataset (train's `--dataset`).
        space: a mapping, as the YAML/JSON space file holds it, or that file's path.
        metric, mode, trials, output_dir, parallel, sampler, scheduler, pbt_interval,
            storage, study_name, seed, timeout, max_failures, on, address, workers,
            cpus_per_member, gpus_per_member: tune's flags of those names.
        train_argv: `tfyard train` flags every trial shares, e.g. `["--epochs", "4"]`.
        **options: train options by their Python names (`epochs=4`, `batch_size=64`),
            shared by every trial as `train_argv` is.
    """
    from tfyard.tune.checked import search, trial_argv
    from tfyard.tune.search import run

    argv = [*map(str, train_argv), *trial_argv(model, data, options)]
    return run(search(space, metric, mode, trials, output_dir, parallel=parallel,
                      sampler=sampler, scheduler=scheduler, pbt_interval=pbt_interval,
                      storage=storage, study_name=study_name, seed=seed, timeout=timeout,
                      max_failures=max_failures, on=on, address=address, workers=workers,
                      cpus_per_member=cpus_per_member, gpus_per_member=gpus_per_member,
                      train_argv=argv))


callable_package(__name__, tune)
