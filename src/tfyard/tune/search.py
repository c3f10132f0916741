"""The search loop: ask Optuna for trials, keep --parallel of them running as `tfyard train`
processes, tell Optuna how each ended. Everything a rerun needs is in the storage and the
trial directories, so the same command again continues the study: finished and pruned trials
stay, a trial a killed tune left running resumes from its own checkpoint (train takes over
the dead holder's lease), and --trials counts finished and pruned ones."""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass, field, fields, replace

from tfyard.errors import PAUSED_EXIT_CODE, UserError
from tfyard.launch.attempt import describe_exit
from tfyard.launch.forked import ForkServer
from tfyard.launch.stops import Stopped, install_stop_handlers, restore_handlers, stops_held
from tfyard.runfiles.files import LocalFiles
from tfyard.runfiles.place import StudyPlace
from tfyard.tracking import Settings
from tfyard.tracking.study import StudyRuns
from tfyard.train.options import TRACK, TrainOptions
from tfyard.tune import pbt
from tfyard.tune import study as studies
from tfyard.tune import trial as trials
from tfyard.tune.onray import RayTrials
from tfyard.tune.rungs import Rungs
from tfyard.tune.space import Param
from tfyard.tune.trial import RunningTrial

POLL_S = 0.1   # a pruned trial trains until tune reads its figure: small models run fast
# Train options that say where a run is tracked, not what it trains: a rerun may change them.
UNSEARCHED = {f.name for f in fields(TrainOptions) if f.metadata["group"] == TRACK}
PLOT_S = 60.0   # tune.png is drawn at most this often while trials run (~1 s of a core)


@dataclass(frozen=True)
class Search:
    """A checked `tfyard tune` command: what to search, how, and where."""

    space: list[Param]
    metric: studies.Metric
    direction: str                  # "maximize" or "minimize"
    trials: int
    output_dir: str
    train_argv: list[str]           # every trial's shared `tfyard train` flags
    storage: str
    study_name: str
    parallel: int = 1
    threads: int | None = None      # each trial's CPU threads when trials share the machine
    gpus: tuple[str, ...] = ()      # each trial slot's CUDA_VISIBLE_DEVICES (none: no GPU)
    sampler: str = "tpe"
    scheduler: str = "none"
    seed: int | None = None
    timeout: float | None = None
    max_failures: int = 2
    tracking: Settings | None = None  # MLflow: the study's parent run, a child a trial
    fixed_argv: list[str] = field(default_factory=list)   # the space's plain values
    evaluations: int = 0            # evaluations a trial makes (0: its own --eval_every_*)
    budget: str = "epochs"          # what a trial's length is in: "epochs" or "train_steps"
    length: float | None = None     # a trial's length unless the space searches it
    min_resource: float | None = None   # the first rung, in the budget's unit (`tune.rungs`)
    pbt_interval: int | None = None  # --scheduler pbt: steps between exploit/explore rounds
    ray: RayTrials | None = None    # --on ray: each trial a `launch ray` on that cluster
    shared: dict = field(default_factory=dict)   # the train options every trial shares, given
    settings: dict = field(default_factory=dict)   # tune's own, as tune.json records them

    def identity(self) -> dict:
        """What the study searches: fixed when it is created (its user attribute
        `studies.IDENTITY`), and every later command on it must agree."""
        space = {p.name: {p.kind: list(p.values)} if p.kind else p.values[0]
                 for p in self.space}
        return {"metric": self.metric.name, "direction": self.direction,
                "space": json.dumps(space, sort_keys=True), "sampler": self.sampler,
                "scheduler": self.scheduler, "min_resource": self.min_resource,
                "seed": self.seed,
                "train": json.dumps({k: v for k, v in self.shared.items()
                                     if k not in UNSEARCHED}, sort_keys=True, default=str)}

    def place(self) -> StudyPlace:
        return StudyPlace(self.output_dir)

    def grid(self) -> dict | None:
        return {p.name: list(p.values) for p in self.space if p.kind} \
            if self.sampler == "grid" else None


def run(search: Search) -> dict:
    """Run the study to --trials finished or pruned trials; returns tune.json's content.
    With --on ray, inside one Ray session: the trials' launchers join its cluster."""
    if search.ray is None:
        return _run(search)
    with search.ray.session(search.parallel) as joined:
        return _run(replace(search, ray=joined))


def _run(search: Search) -> dict:
    processes = trials.trial_processes(trials.trial_env(search))
    try:
        if search.ray is None:
            processes.prepare(trials.TRAIN)   # TensorFlow's import beside the opening
        return _study(search, processes)
    finally:
        processes.close()


def _study(search: Search, processes: ForkServer) -> dict:
    opened = _open(search)
    loop = _Loop(search, processes, opened)
    previous = install_stop_handlers()   # SIGINT/SIGTERM: Stopped, trials saved first
    try:
        loop.run()
    except Stopped as stop:
        loop.stop(stop)
    finally:
        restore_handlers(previous)
    summary = _summary(search, opened.study, opened.place)
    failed = loop.failures > search.max_failures
    if opened.runs:
        opened.runs.close(opened.place.home.root, "FAILED" if failed else "FINISHED")
    if failed:
        raise UserError(f"{loop.failures} trials failed, more than --max_failures "
                        f"{search.max_failures}; see {opened.place.home.logs}, "
                        "fix the cause and rerun the same command to go on")
    return summary


@dataclass
class _Opened:
    """A study as this tune opened it: Optuna's study and storage, its rungs, where it
    lives, its MLflow runs, how many trials it wants, PBT's population, and the trials a
    killed tune left running here."""

    study: object
    storage: object
    rungs: Rungs
    place: StudyPlace
    runs: StudyRuns | None
    wanted: int
    population: pbt.Population | None
    left: list


def _open(search: Search) -> _Opened:
    """Create or load the study (recording its identity when new), set its pruner, start its
    MLflow runs, make its folders, and finish a PBT round a killed tune left midway."""
    optuna = studies.import_optuna()
    storage = studies.open_storage(search.storage)
    study = optuna.create_study(
        storage=storage, study_name=search.study_name,
        direction=search.direction, load_if_exists=True,
        sampler=studies.sampler(search.sampler, search.seed, search.grid()))
    if not study.user_attrs.get(studies.IDENTITY):   # new, or made by an earlier tfyard
        study.set_user_attr(studies.IDENTITY, search.identity())
    rungs = Rungs(search.scheduler, search.evaluations, search.budget, search.min_resource)
    rungs.open(study)
    place = search.place()
    directory = place.home   # the logs, and the summary before a bucket's upload
    runs = StudyRuns.start(search.tracking, study, directory.root, _described(search))
    for folder in (directory.logs, *([] if place.url else [directory.trials])):
        LocalFiles().make_directory(folder)
    wanted = search.trials
    if search.sampler == "grid":
        wanted = min(wanted, math.prod(len(values) for values in search.grid().values()))
    left = [t for t in study.get_trials(deepcopy=False,
                                        states=(optuna.trial.TrialState.RUNNING,))
            if place.holds(t.user_attrs.get("run_dir"))]
    population = pbt.Population(search.space, search.pbt_interval, search.direction ==
                                "maximize", search.seed, place, storage) \
        if search.scheduler == "pbt" else None
    for line in population.finish(study, search.metric.name) if population else ():
        print(line, flush=True)   # a round a killed tune left midway, before any resume
    return _Opened(study, storage, rungs, place, runs, wanted, population, left)


class _Loop:
    """--parallel trials kept running until the study has its trials: first those to resume
    (left running by a killed tune, or paused at PBT's interval), then new ones asked of
    Optuna; each ending told to Optuna, the summary rewritten once the next have started."""

    def __init__(self, search: Search, processes: ForkServer, opened: _Opened):
        self.search, self.processes, self.opened = search, processes, opened
        self.states = studies.import_optuna().trial.TrialState
        self.left = list(opened.left)
        self.running: dict[int, RunningTrial] = {}
        self.paused: dict[int, float | None] = {}   # PBT: stopped at the interval, values
        self.failures = 0
        self.deadline = time.monotonic() + (search.timeout or math.inf)
        self.ended, self.plotted = False, time.monotonic()   # an end since the summary

    def run(self) -> None:
        while True:
            if self.paused and not self.running:   # the population at its interval
                self._next_round()
            self._start_more()
            if self.ended:   # once the next trials have started: they need not wait for it
                self._summarize()
            if not self.running:
                return
            time.sleep(POLL_S)
            self._reap()

    def _next_round(self) -> None:
        """PBT's round: exploit and explore, then resume the whole population."""
        opened = self.opened
        for line in opened.population.next_round(opened.study, self.paused,
                                                 self.search.metric.name):
            print(line, flush=True)
        self.left = [t for t in opened.study.get_trials(deepcopy=False)
                     if t.number in self.paused]
        self.paused = {}

    def _start_more(self) -> None:
        search, opened = self.search, self.opened
        done, busy = _counts(opened.study, self.states)
        while len(self.running) < search.parallel and (self.left or (
                done + busy < opened.wanted and self.failures <= search.max_failures
                and time.monotonic() < self.deadline)):
            with stops_held():   # no trial asked of Optuna is left without its run
                resumed = self.left.pop(0) if self.left else None
                if resumed is None:
                    _reseed(search, opened.study, opened.place)
                asked = None if resumed else _ask(opened.study, self.states, opened.wanted)
                if not (asked or resumed):
                    return   # the study is full: another tune asked at the same moment
                busy += resumed is None
                trial = trials.start_trial(
                    search, opened.study, opened.storage, asked, resumed, opened.runs,
                    opened.population, self.processes,
                    [t.devices for t in self.running.values()], opened.rungs)
                self.running[trial.number] = trial

    def _summarize(self) -> None:
        plot = time.monotonic() - self.plotted >= PLOT_S
        _summary(self.search, self.opened.study, self.opened.place, plot)
        self.ended = False
        if plot:
            self.plotted = time.monotonic()

    def _reap(self) -> None:
        """Tell Optuna how each trial that ended did; keep PBT's paused ones aside."""
        opened = self.opened
        for number, trial in list(self.running.items()):
            if not trial.poll():
                continue
            del self.running[number]
            if opened.population and trial.proc.returncode == PAUSED_EXIT_CODE \
                    and not trial.pruned:   # stopped at its --pause_at_step
                self.paused[number] = trial.value
                continue
            self.failures += not _tell(self.search, opened.study, self.states, trial)
            if opened.runs:
                opened.runs.ended(opened.study, number, self.search.metric.name)
            opened.place.publish(trial.log_path)
            self.ended = True

    def stop(self, stop: Stopped) -> None:
        """SIGINT/SIGTERM: every running trial saves and ends, the summary is written, and
        tune exits 128 + the signal; the same command continues the study."""
        running, opened = list(self.running.values()), self.opened
        for trial in running:
            trial.stop()
        for trial in running:
            trial.wait()
        opened.place.publish(*(trial.log_path for trial in running))
        _summary(self.search, opened.study, opened.place)
        if opened.runs:
            opened.runs.close(opened.place.home.root, "KILLED")   # a rerun continues it
        print(f"tune: stopped; {len(running)} running trial(s) saved a checkpoint and "
              "continue when the same command runs again", file=sys.stderr)
        raise SystemExit(128 + stop.signum) from None


def _summary(search: Search, study, place: StudyPlace, plot: bool = True) -> dict:
    return studies.write_summary(study, place, search.storage, search.metric.name,
                                 search.settings, plot)


def _described(search: Search) -> dict:
    """The study's settings, as its MLflow parent run's parameters (each trial's child
    has the trial's own, train's options included)."""
    return {**search.identity(), "seed": search.seed}


def _counts(study, states) -> tuple[int, int]:
    """The study's finished and pruned trials, and those running or waiting: in a study
    several tunes share (one --storage), the others' trials count too."""
    trials = study.get_trials(deepcopy=False)
    return (sum(t.state in (states.COMPLETE, states.PRUNED) for t in trials),
            sum(t.state in (states.RUNNING, states.WAITING) for t in trials))


def _reseed(search: Search, study, place) -> None:
    """With --seed, the sampler of the next trial is seeded by the study's seed, the trial's
    number (the next the storage gives) and, where tunes may share the study (a --storage
    given), this tune's DIR as `place` spells it, absolute (`runs/a`, `./runs/a/` and
    `$PWD/runs/a` are one DIR): a rerun after a kill draws what the unbroken study drew, a
    study of DIR's own database draws alike wherever DIR is, and two tunes on one study draw
    apart. (The grid needs none: its trial number N takes point N of one order that the
    study's seed shuffles, the same in every tune.)"""
    if search.seed is not None and search.sampler != "grid":
        number = len(study.get_trials(deepcopy=False))
        shared = search.storage != studies.default_storage(search.output_dir)
        study.sampler = studies.sampler(search.sampler, studies.derived_seed(
            search.seed, place.runs.root if shared else None, number), search.grid())


def _ask(study, states, wanted: int):
    """A new trial of the sampler's, or None when it is one too many. Two tunes sharing the
    storage may both see room for one more trial and both ask; the storage numbers trials
    in order, so the one numbered past `wanted` trials that count (all but the failed) is
    told failed, marked surplus, and never run."""
    trial = study.ask()
    ahead = sum(t.number < trial.number and t.state != states.FAIL
                for t in study.get_trials(deepcopy=False))
    if ahead < wanted:
        return trial
    trial.set_user_attr(studies.SURPLUS, True)
    study.tell(trial, state=states.FAIL)
    print(f"tune: trial {trial.number} not run: the study has its {wanted} trials (another "
          "tune on the same --storage asked at the same moment)", flush=True)
    return None


def _tell(search: Search, study, states, trial: RunningTrial) -> bool:
    """Record how `trial` ended; False for a failure."""
    name, code = search.metric.name, trial.proc.returncode
    if trial.pruned:
        study.tell(trial.trial, state=states.PRUNED)
        print(f"tune: trial {trial.number} pruned at step {trial.step}: "
              f"{name} {trial.value:.4g}", flush=True)
        return True
    if code == 0 and trial.value is not None and math.isfinite(trial.value):
        study.tell(trial.trial, trial.value)
        print(f"tune: trial {trial.number} finished: {name} {trial.value:.4g}", flush=True)
        return True
    study.tell(trial.trial, state=states.FAIL)
    why = describe_exit(code) if code else f"no finite {name} reported"
    print(f"tune: trial {trial.number} failed ({why}): {trial.tail()}", file=sys.stderr,
          flush=True)
    return False
