"""`tfyard train` end to end: platform, role, then a Trainer under a Controller with actions.

`run(argv)` is the entry point for the seed scripts and for Spark tasks; `train(options)`
does the work and returns the run summary. What a start records and says about itself
(run.json's record, its first lines, the summary) is `train.account`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import TYPE_CHECKING

from tfyard import platform as platform_contract
from tfyard import tracking
from tfyard.data import formats
from tfyard.distribute import coordination, heartbeat, server
from tfyard.distribute import strategy as strategies
from tfyard.distribute.cluster import load_cluster_config
from tfyard.distribute.gather import gather
from tfyard.distribute.lost import peer_loss
from tfyard.distribute.watchdog import StartupWatchdog
from tfyard.errors import PAUSED, PAUSED_EXIT_CODE, PREEMPTED, UserError
from tfyard.process import envvars
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import RunDirectory, WorkDirectory, checkpoint_name
from tfyard.runfiles.record import amend_run
from tfyard.runfiles.study import refuse_a_study
from tfyard.storage import stream
from tfyard.train.account import announce, finish, member_name, run_record
from tfyard.train.options import TrainOptions, parse_train_args
from tfyard.train.outside.console import configure_console
from tfyard.train.rundir.bucket import published
from tfyard.train.rundir.directory import STARTS, refuse_other_run, started
from tfyard.train.rundir.lease import take_lease
from tfyard.train.task import usercode

if TYPE_CHECKING:  # build imports TensorFlow; job loads it only once it trains
    from tfyard.train.build import Prepared

log = logging.getLogger("tfyard")


def run(argv: list[str] | None = None, prog: str = "tfyard train") -> int:
    """Parse a training command line (classic spellings included) and train."""
    options = parse_train_args(argv, prog=prog)
    configure_console(options.quiet)
    train(options)
    return 0


def train(options: TrainOptions, model=None, data=None, eval_data=None,
          num_classes: int | None = None, class_names=None) -> dict | None:
    """Train as this process's role says; returns the summary (None for servers).

    `model`, `data` and `eval_data` replace `options.model` and `options.dataset` with the
    user's own (`tfyard.fit`); see `train.task.make_task`."""
    plat = platform_contract.resolve(options.data_dir, options.output_dir, options.work_dir,
                                     options.log_dir, options.num_gpus, create=False)
    if options.data_cache_limit is None:   # run.json keeps the limit the environment set
        options = options.with_updates(
            data_cache_limit=envvars.size("TFYARD_DATA_CACHE_LIMIT"))
    with made_dirs(plat.output_dir, plat.work_dir, plat.log_dir):
        return _train(options, plat, model, data, eval_data, num_classes, class_names)


@contextlib.contextmanager
def made_dirs(*paths: str):
    """Create the run's directories; when the run fails, remove those it created that are
    still empty, so a start refused in one line (a wrong --data_dir) leaves nothing behind."""
    created = []
    for path in paths:
        files = files_for(path)
        while not files.remote and not files.has(path) and path not in created:
            created.append(path)
            path = os.path.dirname(path)
    for path in paths:
        files_for(path).make_directory(path)
    try:
        yield
    except BaseException:
        for path in sorted(created, key=len, reverse=True):   # the deepest first
            with contextlib.suppress(OSError):   # not empty: the run wrote there
                os.rmdir(path)
        raise


def _train(options: TrainOptions, plat, model, data, eval_data, num_classes: int | None,
           class_names) -> dict | None:
    cluster = load_cluster_config()
    heartbeat.start_from_env()  # the launcher watches for frozen members
    plan = strategies.choose(cluster, plat.num_gpus, options.ds)
    if plan.behaviour == "serve":
        run = RunDirectory(plat.output_dir)
        status = server.serve(cluster, startup_timeout=options.startup_timeout,
                              chief_files=(run.lease, run.run_file, run.summary))
        if status:
            raise SystemExit(status)  # SIGTERM: 143; a lost chief: 75; both restart it
        return None
    named = options.dataset if data is None else data
    if isinstance(named, str) and not usercode.is_reference(named):
        formats.known(named)   # a mistyped dataset answers before TensorFlow is imported
    if plan.behaviour == "evaluate" and plat.output_url:
        raise UserError(f"--output_dir {plat.output_url}: an evaluator member cannot follow a "
                        "run in a bucket yet; evaluate it afterwards with `tfyard evaluate`")
    refuse_a_study(plat.output_url or plat.output_dir)
    with published(plat, cluster, options.startup_timeout) as run, \
            take_lease(plat.output_dir, cluster):  # one writer per output_dir; readers never
        from tfyard.train.task.task import make_task

        def task_for(options, plat, strategy=None):
            return make_task(options, plat, model, data, eval_data, num_classes, strategy,
                             class_names)

        if plan.behaviour == "evaluate":
            return _sidecar(options, plat, cluster, plan, task_for)
        return _trained(options, plat, cluster, plan, run, task_for)


def _sidecar(options: TrainOptions, plat, cluster, plan, task_for) -> dict | None:
    """An evaluator member: each checkpoint the chief writes, evaluated as it comes."""
    from tfyard.train.build import RunContext, settle_dtype
    from tfyard.train.evaluate import run_sidecar

    options = settle_dtype(RunContext(options, plat, cluster, plan),
                           options.startup_timeout).options
    task = task_for(options, plat)
    refuse_other_run(plat.output_dir, **task.identity())
    return run_sidecar(options, plat, task)


def _trained(options: TrainOptions, plat, cluster, plan, run, task_for) -> dict | None:
    """A training member, from the strategy to the summary (`run`: the published run)."""
    from tfyard.train.build import RunContext, prepare, settle_dtype, start_strategy
    from tfyard.train.outside import preemption

    preemption.install()  # SIGTERM: save at the current step, exit 143
    watchdog = StartupWatchdog(cluster, options.startup_timeout).start()
    if plan.strategy == "multi_worker_mirrored":
        gather(cluster)   # where SIGTERM still acts: TensorFlow's wait ignores it
    # before the task probes the user's input
    strategy = start_strategy(RunContext(options, plat, cluster, plan))
    # once the cluster has formed: another member of a run in a bucket restores what
    # the chief of its own start reconciled
    plat = run.joined(lambda token: coordination.cluster_start(
        plan, cluster, token, options.startup_timeout))
    # which dtype, once the members can agree on it; run.json keeps it for a resume
    context = settle_dtype(RunContext(options, plat, cluster, plan), options.startup_timeout)
    task = task_for(context.options, plat, strategy)
    refuse_other_run(plat.output_dir, **task.identity())
    prepared = prepare(context, task, strategy, platform_contract.max_steps())
    preemption.install()  # again: TensorFlow's coordination service took SIGTERM over
    controller, restored, tracker = _controller(prepared, watchdog, run.publisher)
    with tracker or contextlib.nullcontext():   # the MLflow run ends as training ends
        announce(prepared, restored, controller.state.start_step, tracker)
        with task.data.checked("train"), input_ended(prepared.numbers.total_steps), \
                peer_loss(cluster, plan.strategy, lambda: controller.state.step):
            state = controller.run()
        summary = finish(prepared, state)
        if state.stop_reason in (PREEMPTED, PAUSED):
            coordination.end_together()  # all-reduce members stopped at the same step
            if state.stop_reason == PAUSED:
                _exit_paused(state.step)
            preemption.exit_preempted(state.step)
        if tracker:
            from tfyard.train.outside import tracked

            tracked.outputs(tracker, plat.output_dir)
    return summary


def _exit_paused(step: int) -> None:
    """The one line, then exit PAUSED_EXIT_CODE: stopped at --pause_at_step as a scheduler
    asked (SystemExit: `finally` blocks and atexit still run)."""
    log.info(f"tfyard: paused at step {step} as --pause_at_step asked; saved checkpoint "
             f"{checkpoint_name(step)}; rerun with a later --pause_at_step, or none, to go on "
             f"(exit {PAUSED_EXIT_CODE})")
    raise SystemExit(PAUSED_EXIT_CODE)


def _tracker(prepared: Prepared):
    """The chief's MLflow run when tracking is on (flags or MLflow's variables), else None;
    started once run.json is written, before step 1."""
    context = prepared.context
    options, plat, cluster = context.options, context.plat, context.cluster
    settings = tracking.settings(options.mlflow_uri, options.experiment, options.run_name,
                                 options.mlflow_optional, options.register_model)
    if settings is None or not cluster.is_coordinator:
        return None
    from tfyard.train.outside import tracked

    # its params are run.json's (`run_record`), as `tfyard track`'s afterwards
    return tracked.start(settings, plat.output_dir, plat.output_url or plat.output_dir)


def _controller(prepared: Prepared, watchdog: StartupWatchdog, publisher):
    """The Controller with this process's actions, and the MLflow run's tracker when the run
    is tracked; the checkpoint is restored first (and run.json written). Each save goes to
    `publisher` too, for a run in a bucket, and each report to the tracker."""
    from tfyard.train import actions
    from tfyard.train.controller import Controller
    from tfyard.train.outside.console import Console
    from tfyard.train.rundir.export import export_model
    from tfyard.train.rundir.report import Reporter

    context, numbers, trainer = prepared.context, prepared.numbers, prepared.trainer
    options, plat, cluster, plan = context.options, context.plat, context.cluster, context.plan
    writes = cluster.is_coordinator
    checkpoints, restored = _restore(prepared, publisher and publisher.checkpoint_saved)
    tracker = _tracker(prepared)
    todo = [actions.OnFirstChunk(watchdog.stop),
            actions.DivergenceGuard(checkpoints, options.dtype, options.skip_nonfinite_steps),
            actions.CheckpointAction(checkpoints, options.checkpoint_every_steps),
            actions.PreemptionAction(prepared.strategy, checkpoints, trainer.synchronize,
                                     pause_at=options.pause_at_step)]
    if options.record_example_ids:
        todo.append(_example_id_log(plat, cluster, trainer))
    if prepared.evaluate and (writes or plan.strategy == "multi_worker_mirrored"):
        # all-reduce members evaluate together, each its share of the evaluation input
        todo.append(actions.EvalAction(prepared.evaluate, prepared.eval_every_steps))
    if writes:   # the run's reports and their lines: once, from the member that writes
        reporter = Reporter(plat.output_dir, plat.log_dir, start=int(trainer.step.numpy()))
        todo.append(actions.MetricsAction(reporter, tracker,
                                          lambda: stream.reported(plat.work_dir)))
        todo.append(actions.ConsoleAction(Console(numbers.total_steps,
                                                  numbers.steps_per_epoch)))
    if writes and options.profile_steps:
        todo.append(actions.ProfileAction(os.path.join(plat.log_dir, "train"),
                                          *options.profile_steps))
    if writes and options.export:
        todo.append(actions.ExportAction(lambda: export_model(
            prepared.model, prepared.task, trainer.config.objective, prepared.policy,
            RunDirectory(plat.output_dir).export)))
    return (Controller(trainer, numbers.total_steps, numbers.steps_per_epoch, todo), restored,
            tracker)


def _restore(prepared: Prepared, saved=None):
    """Checkpoints (model, optimizer, step and the Keras seed states, and the settings every
    save records beside them; `saved(path)` is told of each save), the newest restored; a
    resume with other settings warns in one line."""
    from tfyard.train.build import resume_settings
    from tfyard.train.rundir.checkpoint import (
        Checkpoints,
        read_settings,
        seed_states,
        settings_difference,
    )
    from tfyard.train.weights.pretrained import kept_on_resume

    options, run = prepared.context.options, RunDirectory(prepared.context.plat.output_dir)
    writes = prepared.context.cluster.is_coordinator
    seeds = seed_states(prepared.model)
    settings = resume_settings(prepared)
    checkpoints = Checkpoints(run.checkpoints, writes,
                              options.keep_checkpoints, settings=settings, saved=saved,
                              model=prepared.model,
                              optimizer=prepared.optimizer, step=prepared.trainer.step,
                              **({"seeds": seeds} if seeds else {}))
    restored = checkpoints.restore_latest()   # before run.json: a refusal changes nothing
    if writes:
        def renewed(before: dict | None) -> dict:
            record, before = run_record(prepared), before or {}
            if restored:
                record = kept_on_resume(record, before or None)
            if before.get(tracking.RUN_ID):   # the MLflow run a tracked restart continues
                record[tracking.RUN_ID] = before[tracking.RUN_ID]
            return {**record, STARTS: started(before)}

        amend_run(run.root, renewed)
    if restored and settings and writes:
        difference = settings_difference(settings, read_settings(restored))
        if difference:
            log.warning(difference)
    return checkpoints, restored


def _example_id_log(plat, cluster, trainer):
    """--record_example_ids: after each chunk, one line per step it ran, {"step", "ids"},
    appended to work_dir/example_ids/<member>.jsonl. A resumed run appends the steps it
    re-runs again, so the last line of a step is the one its checkpointed weights saw."""
    from tfyard.train.controller import Callback

    work = WorkDirectory(plat.work_dir)
    work.files.make_directory(work.example_ids)
    path = work.member_example_ids(member_name(cluster))

    def write(state) -> None:
        steps = trainer.take_example_ids()
        first = state.step - len(steps)
        with work.files.appending(path) as handle:
            handle.write("".join(json.dumps({"step": first + i, "ids": ids}) + "\n"
                                 for i, ids in enumerate(steps)))

    return Callback(on_chunk_end=write)


@contextlib.contextmanager
def input_ended(total_steps: int):
    """A user's input that runs out before the last step ends the run in one line."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OutOfRangeError:
        raise UserError(f"the input ended before the {total_steps} steps asked for; add "
                        ".repeat() to the input function or ask for fewer steps") from None
