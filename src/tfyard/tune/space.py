"""The search space: a YAML or JSON file keyed by `tfyard train` option names, each a range
to search or a fixed value, checked whole before any trial so a typo costs no training."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from tfyard.errors import UserError
from tfyard.flags import Parser
from tfyard.train.options import TrainOptions, add_train_arguments

KINDS = ("loguniform", "uniform", "int", "choice")
# Set by tune for each trial: its own directories and its evaluation cadence.
TUNE_SETS = ("output_dir", "work_dir")
OPTIONS = {f.name: f for f in fields(TrainOptions)}


@dataclass(frozen=True)
class Param:
    """One option: searched (`kind` one of KINDS over `values`) or fixed (`kind` None)."""

    name: str
    kind: str | None
    values: tuple

    def suggest(self, trial):
        """This option's value for an Optuna trial (the sampler picks it)."""
        if self.kind is None:
            return self.values[0]
        if self.kind == "choice":
            return trial.suggest_categorical(self.name, list(self.values))
        if self.kind == "int":
            return trial.suggest_int(self.name, *self.values)
        return trial.suggest_float(self.name, *self.values, log=self.kind == "loguniform")


def read_space(space: str | dict) -> list[Param]:
    """The space: a mapping (`tfyard.tune`'s `space=`) or the YAML or JSON file at `space`
    (JSON is YAML), each entry checked; a UserError names the first wrong one."""
    if isinstance(space, dict):
        return _params("--space", space)
    import yaml  # Optuna's own dependency: present whenever tune can run

    try:
        with open(space, encoding="utf-8") as stream:
            raw = yaml.safe_load(stream)
    except OSError as exc:
        raise UserError(f"--space {space}: {exc.strerror}; give a YAML or JSON file") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"--space {space}: not YAML or JSON{line}; fix the file") from None
    return _params(f"--space {space}", raw)


def _params(where: str, raw) -> list[Param]:
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{where}: give a mapping of train options, e.g. "
                        "`learning_rate: {loguniform: [0.001, 0.1]}`")
    return [_param(where, str(name), spec) for name, spec in raw.items()]


def _param(where: str, name: str, spec) -> Param:
    if name in TUNE_SETS or name not in OPTIONS:
        why = "tune sets it for each trial" if name in TUNE_SETS else \
            "not a `tfyard train` option (see `tfyard train --help`, names with underscores)"
        raise UserError(f"{where}: {name}: {why}")
    if not (isinstance(spec, dict) and len(spec) == 1 and next(iter(spec)) in KINDS):
        if isinstance(spec, dict):
            raise UserError(f"{where}: {name}: give one of {', '.join(KINDS)} "
                            "(e.g. {uniform: [0, 1]}) or a plain value")
        _check_value(where, name, spec)
        return Param(name, None, (spec,))
    kind, values = next(iter(spec.items()))
    if kind == "choice":
        if not isinstance(values, list) or not values:
            raise UserError(f"{where}: {name}: choice takes a non-empty list")
        for value in values:
            _check_value(where, name, value)
        return Param(name, kind, tuple(values))
    numbers = (int,) if kind == "int" else (int, float)
    if not (isinstance(values, list) and len(values) == 2
            and all(isinstance(v, numbers) and not isinstance(v, bool) for v in values)):
        what = "integers" if kind == "int" else "numbers"
        raise UserError(f"{where}: {name}: {kind} takes two {what} [lo, hi]")
    lo, hi = values
    if not lo < hi:
        raise UserError(f"{where}: {name}: {kind} needs lo < hi, got [{lo}, {hi}]")
    if kind == "loguniform" and lo <= 0:
        raise UserError(f"{where}: {name}: a log range must stay above 0, got "
                        f"[{lo}, {hi}]; use uniform or raise lo")
    if not all(map(math.isfinite, values)):
        raise UserError(f"{where}: {name}: {kind} takes finite numbers")
    for value in values:
        _check_value(where, name, value)
    return Param(name, kind, (lo, hi) if kind == "int" else (float(lo), float(hi)))


def _check_value(where: str, name: str, value) -> None:
    """The option's own check on `value`, as `tfyard train` would refuse it; lists (layer
    patterns) are searched as whole comma-separated strings, which Optuna can store."""
    if not isinstance(value, (str, int, float, bool)) and value is not None:
        raise UserError(f"{where}: {name}: {value!r} is not a plain value; give lists "
                        "as one comma-separated string")
    if OPTIONS[name].type.startswith("bool") and not isinstance(value, bool):
        raise UserError(f"{where}: {name}: {value!r}: give true or false")
    try:
        option_argv({name: value})
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None


def option_argv(params: dict) -> list[str]:
    """The `tfyard train` flags that set `params`, each checked as the option checks it
    (a UserError naming the option and its refusal)."""
    argv = TrainOptions(**params).to_argv(params)
    add_train_arguments(RefusingParser(prog="tfyard train")).parse_args(argv)   # flag choices
    return argv


class RefusingParser(Parser):
    """A parser whose refusals are raised as UserError, so the space's line can name them and
    `tfyard.tune` raises rather than exits."""

    def error(self, message):  # noqa: D102 - argparse API
        raise UserError(f"{self.explained(message)} (see `{self.prog} --help`)")
