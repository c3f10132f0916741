"""Where pruning starts: a study's first rung. Figures taken inside a trial's first epoch or
its learning-rate warm-up cannot yet tell configurations apart (a study of cifar_resnet8 on
the digits, pruned at 14 and 42 of its 138 steps, pruned at chance level and kept a trial
that ended at 20 %). So by default the first rung is the first evaluation past both, and
the pruner (successive halving's `min_resource`, the median rule's `n_warmup_steps`) acts
from there only; `--min_resource` sets the point instead, in the budget's unit. (Halving's
`min_resource` is always given: Optuna's default learns it only when a trial ends, and the
trials running then enter every rung at once with a late figure.)

A trial's epoch is known from its first evaluation (its `step` and `epoch`) and its warm-up
from its run.json (`warmup_steps`), so the rung is learned from the first figure any trial
reports and recorded in the study: a rerun, and another tune on the same study, prune at
the same rungs."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from tfyard.tune.study import import_optuna

FIRST_RUNG = "tfyard.first_rung"   # the study's user attribute: the first rung's Optuna step
PRUNERS = ("median", "asha")   # the schedulers that prune at rungs
HALVING = 4   # successive halving keeps a quarter at each rung (Optuna's default)


@dataclass
class Rungs:
    """The rungs of a study's pruner: `first`, the Optuna step of the first, once known."""

    scheduler: str
    evaluations: int   # a trial's evaluations (tune's cadence); 0: Optuna steps are steps
    budget: str        # "epochs" or "train_steps": the unit of `min_resource`
    min_resource: float | None = None
    first: int | None = None

    def open(self, study) -> None:
        """Set the study's pruner: no pruning until the first rung is known, from the
        study's record or the first figure; say where the rungs are."""
        optuna = import_optuna()
        if self.scheduler not in PRUNERS:
            study.pruner = optuna.pruners.NopPruner()
            return
        recorded = study.user_attrs.get(FIRST_RUNG)
        if recorded:
            self._set(study, int(recorded), "as the study recorded it")
            return
        study.pruner = optuna.pruners.NopPruner()
        where = (f"--min_resource {self.min_resource:g} {self._unit()}"
                 if self.min_resource else "a trial's first epoch and its learning-rate "
                 "warm-up")
        print(f"tune: {self.scheduler} prunes from the first evaluation past {where} (set "
              "when the first figure comes)", flush=True)

    def ready(self, study, record: dict, warmup: Callable[[], int],
              every: tuple[str, float] | None) -> bool:
        """Whether the pruner may be asked at `record`, a trial's figure: once the first
        rung is known, or learned now from this figure and the trial's `warmup()` (its
        warm-up in steps); `every` is the trial's cadence (unit, spacing), None for its
        own."""
        if self.scheduler not in PRUNERS:
            return False
        if self.first is None:
            recorded = study.user_attrs.get(FIRST_RUNG)   # another tune may have learned it
            first, why = (int(recorded), "as the study recorded it") if recorded else \
                self._learned(record, warmup(), every)
            if not recorded:
                study.set_user_attr(FIRST_RUNG, first)
            self._set(study, first, why)
        return True

    def _learned(self, record: dict, warmup_steps: int,
                 every: tuple[str, float] | None) -> tuple[int, str]:
        epoch = record.get("epoch") or 0
        per_epoch = record["step"] / epoch if epoch > 0 else 0.0   # a run's steps an epoch
        if self.min_resource:
            point = self.min_resource * (per_epoch if self.budget == "epochs" else 1)
            why = f"--min_resource {self.min_resource:g} {self._unit()}"
        else:
            point = max(per_epoch, warmup_steps)
            why = f"the first epoch ({per_epoch:.0f} steps) and a warm-up of {warmup_steps} steps"
        if every is None:   # Optuna's steps are the trial's training steps
            return max(1, math.ceil(point)), f"step {point:.0f}: past {why}"
        unit, spacing = every
        spacing *= per_epoch if unit == "epochs" else 1   # training steps between evaluations
        first = max(1, math.ceil(point / spacing - 1e-9))
        if first >= self.evaluations and not self.min_resource:
            first = self.evaluations // 2
            return first, f"half the budget: it ends before the first rung past {why}"
        return first, f"past {why}"

    def _set(self, study, first: int, why: str) -> None:
        pruners = import_optuna().pruners
        self.first = first
        study.pruner = pruners.SuccessiveHalvingPruner(
            min_resource=first, reduction_factor=HALVING) if self.scheduler == "asha" \
            else pruners.MedianPruner(n_warmup_steps=first)
        if self.scheduler == "asha":
            rungs = [first * HALVING ** k for k in range(8)]
            rungs = [rung for rung in rungs if rung <= self.evaluations] \
                if self.evaluations else rungs[:2] + ["..."]
            said = f"asha's rungs at {self._where(rungs or [first])}"
        else:
            said = f"median prunes from {self._where([first])} on"
        print(f"tune: {said} ({why})", flush=True)

    def _where(self, rungs: list) -> str:
        """Rungs as a trial's evaluations, or as training steps."""
        if self.evaluations:
            return f"evaluation(s) {', '.join(map(str, rungs))} of {self.evaluations}"
        return f"step(s) {', '.join(map(str, rungs))}"

    def _unit(self) -> str:
        return "epochs" if self.budget == "epochs" else "steps"
