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


def tune(model=None, data=None, *, train_argv=(), **settings_and_options) -> dict:
    """Run (or continue) the study `tfyard tune` runs with the same settings, and return its
    summary (tune.json's content). Every wrong input is a UserError, worded as the CLI's.

    Args:
        model: a registry name, `"module:function"`, or a module-level function (each trial
            is a process of its own and imports it again by name); None: train's default
            or the space's `model`.
        data: likewise for the dataset (train's `--dataset`).
        train_argv: `tfyard train` flags every trial shares, e.g. `["--epochs", "4"]`.
        **settings_and_options: tune's own settings by the names of its flags
            (`tune.settings.TuneSettings`: `space` a mapping or the YAML/JSON file's path,
            `metric`, `mode`, `trials` and `output_dir` required), and train options by
            their Python names (`epochs=4`, `batch_size=64`), shared by every trial as
            `train_argv` is.
    """
    from tfyard.tune.checked import search, trial_argv
    from tfyard.tune.search import run
    from tfyard.tune.settings import TuneSettings

    mine = TuneSettings.names()
    settings = TuneSettings(**{k: v for k, v in settings_and_options.items() if k in mine})
    options = {k: v for k, v in settings_and_options.items() if k not in mine}
    argv = [*map(str, train_argv), *trial_argv(model, data, options)]
    return run(search(settings, argv))


callable_package(__name__, tune)
