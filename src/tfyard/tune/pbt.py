"""Population-based training (`--scheduler pbt`), tfyard's own exploit and explore on the exact
checkpoints: neither Optuna nor Keras has PBT.

The population is --parallel trials, each an ordinary run that stops at every --pbt_interval
steps (train's --pause_at_step: a checkpoint there, exit 79). When all have stopped, each
trial of the bottom quarter (at least one) takes a top-quarter trial's checkpoint (weights,
optimizer state, step, random states: its checkpoints/ copied whole; in a bucket study,
published into the recipient's prefix, `tune.handover`) and that trial's values, each
perturbed by x0.8 or x1.2 within the space's range; then all go on to the next interval. The
round's draws are kept in the study first, so a tune killed midway finishes that round before
any trial resumes. A recipient keeps its own run directory, run.json, lease and MLflow run.
Optuna's parameters cannot change, so a trial's values and donors, interval by interval, are
its user attribute `pbt_schedule` and its run's pbt.json; its values now are the schedule's
last.
"""

from __future__ import annotations

import json
import random

from tfyard.errors import UserError
from tfyard.tune.handover import hand_over
from tfyard.tune.study import SCHEDULE, derived_seed, reopened, values_now

PERTURBED = ("learning_rate", "weight_decay", "momentum", "label_smoothing")
FACTORS = (0.8, 1.2)
PAUSE = "pbt_pause"         # the study's user attribute: the step the population stops at
ROUND = "pbt_round"         # the study's: the round being handed over, kept before it starts


def check(space, trials: int, parallel: int) -> None:
    """Refuse, in one line, what PBT cannot do: a searched option it cannot change mid-run,
    a choice (no neighbour to move to), or a population other than --trials = --parallel."""
    for param in space:
        if param.kind and (param.name not in PERTURBED or param.kind == "choice"):
            why = "give it as a range" if param.name in PERTURBED else "fix it"
            raise UserError(f"--scheduler pbt perturbs only {', '.join(PERTURBED)} (ranges); "
                            f"{param.name} is searched as {param.kind}: {why} in --space or "
                            "pick another --scheduler")
    if parallel < 2 or trials != parallel:
        raise UserError(f"--scheduler pbt trains one population of --parallel trials at once: "
                        f"give --trials and --parallel the same number, 2 or more (got "
                        f"--trials {trials}, --parallel {parallel})")


def exploit(values: dict[int, float], maximize: bool, rng: random.Random) -> dict[int, int]:
    """Recipient -> donor: each trial of the bottom quarter (at least one) takes a trial of
    the top quarter (at least one), drawn by `rng`."""
    ranked = sorted(values, key=values.__getitem__, reverse=maximize)   # best first
    quarter = max(1, len(ranked) // 4)
    top = ranked[:quarter]
    return {recipient: rng.choice(top) for recipient in ranked[-quarter:]
            if recipient not in top}


def explore(params: dict, space, rng: random.Random) -> dict:
    """`params` with each searched value times 0.8 or 1.2 (drawn by `rng`), kept in its range
    (an int range rounds)."""
    ranges = {p.name: p for p in space if p.kind}
    moved = dict(params)
    for name, param in ranges.items():
        lo, hi = param.values
        value = min(hi, max(lo, params[name] * rng.choice(FACTORS)))
        moved[name] = round(value) if param.kind == "int" else value
    return moved


def scheduled(trial, entry: dict) -> list[dict]:
    """The trial's schedule with `entry` added (once: a round finished again keeps it)."""
    schedule = list(trial.user_attrs.get(SCHEDULE) or [])
    return schedule if schedule[-1:] == [entry] else [*schedule, entry]


class Population:
    """The PBT rounds of one study: where the population stops next, and what each trial
    does between two intervals. `place` is the study's (`runfiles.place.StudyPlace`), `storage`
    the Optuna storage object it lives in."""

    def __init__(self, space, interval: int, maximize: bool, seed: int | None, place,
                 storage):
        self.space, self.interval, self.maximize = space, interval, maximize
        self.seed, self.place, self.storage = seed, place, storage

    def pause(self, study) -> int:
        """The step the population stops at next (a rerun's too): one value for all, so
        the trials stay in step, a trial started late included."""
        return study.user_attrs.get(PAUSE, self.interval)

    def next_round(self, study, stopped: dict[int, float | None], metric: str) -> list[str]:
        """All of the population stopped at its interval, `stopped` (trial number -> its
        latest value): exploit and explore, kept in the study as its ROUND, then `finish`ed.
        Returns what happened, a line a recipient."""
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        live = {number: value for number, value in stopped.items() if value is not None}
        step = self.pause(study)
        rng = random.Random(derived_seed(self.seed, "pbt", step))   # a round's own: a rerun
        moves = [[recipient, donor, explore(values_now(trials[donor]), self.space, rng),
                  live[recipient], live[donor]]
                 for recipient, donor in sorted(exploit(live, self.maximize, rng).items())]
        study.set_user_attr(ROUND, {"step": step, "moves": moves})
        return self.finish(study, metric)

    def finish(self, study, metric: str) -> list[str]:
        """Hand over the round the study keeps (one a killed tune left too: before any trial
        resumes), record each recipient's schedule, and move the population's stop an
        interval on. Each step may run again."""
        plan = study.user_attrs.get(ROUND)
        if not plan:
            return []
        trials = {t.number: t for t in study.get_trials(deepcopy=False)}
        step, said = plan["step"], []
        for recipient, donor, params, value, theirs in plan["moves"]:
            to, source = trials[recipient], trials[donor]
            schedule = scheduled(to, {"step": step, "donor": donor, "params": params})
            text = json.dumps(schedule, indent=2) + "\n"
            run_dir = to.user_attrs["run_dir"]
            copy = self.place.local_run(run_dir, self.place.work_dir(recipient)) \
                if self.place.url else run_dir
            hand_over(source.user_attrs["run_dir"], run_dir, copy, text)
            reopened(study, self.storage, recipient).set_user_attr(SCHEDULE, schedule)
            said.append(f"tune: trial {recipient} ({metric} {value:.4g}) takes trial "
                        f"{donor}'s checkpoint at step {step} ({theirs:.4g}) and goes on "
                        "with " + ", ".join(f"{k}={v:.4g}" for k, v in params.items()))
        study.set_user_attr(PAUSE, step + self.interval)
        study.set_user_attr(ROUND, None)
        return said
