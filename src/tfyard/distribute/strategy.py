"""Role + devices -> what this process does: train under a strategy, serve, or evaluate.

`choose()` is pure (no TensorFlow) so the decision can be shown and tested cheaply;
`create_strategy()` and `serve()` build the TensorFlow objects.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sys
import time
from dataclasses import dataclass

from tfyard.distribute.cluster import ClusterConfig, export_tf_config
from tfyard.distribute.lost import lost_line
from tfyard.errors import LOST_PEER_EXIT_CODE, PREEMPTED, PREEMPTED_EXIT_CODE, UserError
from tfyard.process import envvars
from tfyard.runfiles.files import files_for

STRATEGIES = ("off", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server")
# Inter-op threads for servers: a PS task with fewer than a handful dead-locks on small machines.
MIN_INTER_OP_THREADS = 8
# The all-reduce members meet here at a normal end (see end_together).
END_BARRIER = "tfyard_end_of_job"
END_TIMEOUT_ENV, END_TIMEOUT_S = "TFYARD_END_TIMEOUT", 3600.0
START_KEY = "tfyard_cluster_start"   # the coordinator's id of this start (`cluster_start`)
_end_timeout_s: float | None = None   # set on an all-reduce member: how long end_together waits
_end_leader: str | None = None   # set on an all-reduce member but the leader: the leader's address
# After the end barrier a member outlives the leader, polling its address, for at most this long.
OUTLIVE_LEADER_S = 60.0
# A SIGTERMed ps / PS worker serves on while the chief is up, for at most this long.
SERVER_GRACE_ENV, SERVER_GRACE_S = "TFYARD_SERVER_GRACE", 20.0


@dataclass(frozen=True)
class Plan:
    """What this process will do: `train`, `serve` (ps / PS worker) or `evaluate` (side-car)."""

    behaviour: str
    strategy: str
    reason: str


def choose(cluster: ClusterConfig, num_gpus: int, override: str | None = None) -> Plan:
    """Pick the behaviour and strategy as DESIGN.md's table says; `override` is --ds."""
    if override is not None and override not in STRATEGIES:
        raise UserError(
            f"--distribution_strategy {override!r} is unknown; use one of {', '.join(STRATEGIES)}"
        )
    local = "mirrored" if num_gpus > 1 else "one_device"
    if cluster.role == "evaluator":
        return Plan("evaluate", _local_override(override, local),
                    "evaluator: side-car that evaluates each new checkpoint")
    members = sum(len(v) for v in cluster.training_jobs.values())
    if cluster.has_ps:
        if override not in (None, "parameter_server"):
            raise UserError(
                f"--ds={override} cannot use the ps tasks in TF_CONFIG; use "
                "--ds=parameter_server or remove the ps job"
            )
        if cluster.role == "chief":
            return Plan("train", "parameter_server",
                        "chief of a cluster with ps: coordinates asynchronous training")
        return Plan("serve", "parameter_server",
                    f"{cluster.role} of a cluster with ps: serves until the chief ends")
    if override == "parameter_server":
        raise UserError(
            "--ds=parameter_server needs ps tasks, but TF_CONFIG has none; add a \"ps\" job "
            "(and a chief) to TF_CONFIG or choose another strategy"
        )
    if cluster.role != "single" and members > 1:
        if override not in (None, "multi_worker_mirrored"):
            raise UserError(
                f"--ds={override} trains on one machine, but TF_CONFIG lists {members} members; "
                "use --ds=multi_worker_mirrored or unset TF_CONFIG"
            )
        return Plan("train", "multi_worker_mirrored",
                    f"{cluster.role} of {members} members without ps: collective all-reduce")
    if override is not None:
        return Plan("train", override, f"--ds={override}")
    devices = f"{num_gpus} GPUs" if num_gpus != 1 else "1 GPU"
    return Plan("train", local, f"no cluster, {devices}")


def _local_override(override: str | None, default: str) -> str:
    if override in ("multi_worker_mirrored", "parameter_server"):
        raise UserError(f"--ds={override} is not for the evaluator; it evaluates on one machine")
    return override or default


# Logical devices and collectives can be set only before TensorFlow's runtime starts.
STARTED = ("TensorFlow's runtime already started in this process (a TensorFlow op ran before "
           "training); call tfyard.fit before any TensorFlow op, or in a fresh process")


def configure_cpu_replicas(count: int) -> None:
    """Split the CPU into `count` logical devices so Mirrored can replicate on CPU only."""
    if count <= 1:
        return
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    if len(tf.config.get_logical_device_configuration(cpus[0]) or ()) == count:
        return   # a second run in this process (tfyard.fit again)
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(count)]
        )
    except RuntimeError:
        raise UserError(f"--cpu_replicas {count}: {STARTED}") from None


def describe_devices(num_gpus: int) -> str:
    """The devices a member trains on, named as the driver names them, with the memory each
    may use ("1 GPU: NVIDIA H200 (compute 9.0, 131.6 GiB, memory growth on)"), so a run's
    first lines say whether the GPU was found at all and what a trial sharing it got."""
    if not num_gpus:
        return "on the CPU"
    import tensorflow as tf

    from tfyard import compat

    gpus = compat.local_gpus()[:num_gpus]
    cards = {card for _, _, card in gpus}
    names = [f"{_card_field(card, 'name')} (compute {_card_field(card, 'compute capability')}"
             f", {memory / 2**30:.1f} GiB)" for _, memory, card in gpus]
    counted = {name: names.count(name) for name in names}
    kinds = ", ".join(f"{count} x {name}" if count > 1 else name
                      for name, count in counted.items())
    growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" or any(
        tf.config.experimental.get_memory_growth(gpu)
        for gpu in tf.config.list_physical_devices("GPU"))
    shared = f", carved from {len(cards)} card(s)" if len(cards) < len(gpus) else ""
    return (f"on {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: {kinds}{shared}"
            f"{', memory growth on' if growth else ''}")


def _card_field(card: str, field: str) -> str:
    """One field of TensorFlow's description of a card ("device: 0, name: NVIDIA H200, pci
    bus id: ..., compute capability: 9.0")."""
    fields = dict(part.split(": ", 1) for part in card.split(", ") if ": " in part)
    return fields.get(field, "?")


def gpu_cards(num_gpus: int) -> list[tuple[str, tuple[int, int]]]:
    """(name, compute capability) of each GPU a member trains on: what decides `--dtype
    auto` and the peak a benchmark is measured against. Call once the strategy is made."""
    if not num_gpus:
        return []
    from tfyard import compat

    return [(_card_field(card, "name"),
             tuple(int(n) for n in _card_field(card, "compute capability").split(".")
                   if n.isdigit()) or (0, 0))
            for _, _, card in compat.local_gpus()[:num_gpus]]


def shares_a_card(devices: list[str]) -> bool:
    """Whether some of these logical GPUs were carved from one card: NCCL refuses two ranks
    on one GPU, so their all-reduce goes through one device instead."""
    from tfyard import compat

    cards = {name: card for name, _, card in compat.local_gpus()}
    used = [cards.get(name.replace("/gpu:", "/device:GPU:"), name) for name in devices]
    return len(set(used)) < len(used)


def _resolver(cluster: ClusterConfig, num_gpus: int):
    import tensorflow as tf

    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster.training_jobs),
        task_type=cluster.task_type,
        task_id=cluster.task_index,
        rpc_layer=cluster.rpc_layer or "grpc",
        num_accelerators={"GPU": num_gpus} if num_gpus else None,
    )


@functools.cache
def _mirrored(devices: tuple[str, ...]):
    """One MirroredStrategy per device set in a process. Each new one numbers its collectives
    from the same first keys, which the runtime keeps bound to the shapes of the earlier
    one's: a notebook's next fit of another model would fail ("Shape mismatch in the
    collective instance 100"). One strategy goes on numbering where it left off. GPUs
    carved from one card reduce through one of them (TensorFlow would pick NCCL)."""
    import tensorflow as tf

    one_card = devices[0].startswith("/gpu:") and shares_a_card(list(devices))
    return tf.distribute.MirroredStrategy(
        list(devices), cross_device_ops=tf.distribute.ReductionToOneDevice() if one_card
        else None)


def create_strategy(plan: Plan, cluster: ClusterConfig, num_gpus: int):
    """Build the tf.distribute strategy the plan names (for `train` and `evaluate`)."""
    import tensorflow as tf

    name = plan.strategy
    if name == "off":
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if num_gpus else "/cpu:0")
    if name == "mirrored":
        if num_gpus:
            devices = [f"/gpu:{i}" for i in range(num_gpus)]
        else:
            devices = [d.name for d in tf.config.list_logical_devices("CPU")]
        return _mirrored(tuple(devices))
    export_tf_config(cluster)
    if name == "multi_worker_mirrored":
        global _end_timeout_s, _end_leader
        _end_timeout_s = envvars.number(END_TIMEOUT_ENV, END_TIMEOUT_S)
        _end_leader = None if cluster.is_coordinator else _leader_address(cluster)
        try:
            return tf.distribute.MultiWorkerMirroredStrategy(
                cluster_resolver=_resolver(cluster, num_gpus)
            )
        except RuntimeError as exc:   # "Collective ops must be configured at program startup"
            if "startup" not in str(exc):
                raise
            raise UserError(f"all-reduce training: {STARTED}") from None
    if name == "parameter_server":
        return tf.distribute.experimental.ParameterServerStrategy(_resolver(cluster, 0))
    raise AssertionError(f"unhandled strategy {name}")


def cluster_start(plan: Plan, cluster: ClusterConfig, chief_id: str | None,
                  timeout: float) -> str | None:
    """The id every member of this start of an all-reduce cluster shares: the coordinator's
    `chief_id`, which the others read from the cluster's coordination service. Called once
    the strategy has formed the cluster, so a member gets the id of the chief it started
    with, never one of another start (a replaced pod's old chief, still running, is in no
    cluster with it). None for the other strategies (their other members write no run)."""
    if plan.strategy != "multi_worker_mirrored":
        return None
    shared = chiefs_word(cluster, START_KEY, chief_id or "", timeout,
                         "which start of the cluster this is")
    return chief_id if cluster.is_coordinator else shared


def chiefs_word(cluster: ClusterConfig, key: str, value: str, timeout: float,
                what: str) -> str:
    """The coordinator's `value` under `key`, on every member of an all-reduce cluster: the
    coordinator shares it in the coordination service, the others wait for it (one line
    after `timeout` s). Call once the strategy has formed the cluster."""
    import tensorflow as tf

    from tfyard import compat

    if cluster.is_coordinator:
        compat.share_in_cluster(key, value)
        return value
    try:
        return compat.shared_in_cluster(key, int(timeout * 1000))
    except tf.errors.OpError:
        raise UserError(f"all-reduce training: the chief did not say {what} within "
                        f"{timeout:.0f}s; check that it runs, or raise "
                        "--startup_timeout") from None


def end_together() -> None:
    """At a normal end, wait until every all-reduce member has ended too.

    The coordination service runs inside the leader (worker 0 or the chief) and takes a
    member whose heartbeats stop for a crashed task: a member that leaves while the
    leader still evaluates or exports makes the leader print "The tasks have crashed"
    ten seconds later. TensorFlow 2.21 offers no public agent shutdown, so the members
    meet at a barrier instead; first they end their input pipelines, whose threads held
    up the leader's interpreter teardown. Past the barrier the others stay until the
    leader's process is gone (its teardown alone took over 10 s on a starved CI machine).
    A member that really crashed never arrives; then the barrier fails or times out, and
    the launcher names that member. Call only after a successful run; a no-op for every
    other strategy. It waits at most TFYARD_END_TIMEOUT s (default 3600).
    """
    if _end_timeout_s is None:
        return
    import gc

    import tensorflow as tf

    from tfyard import compat

    gc.collect()
    try:
        compat.wait_at_barrier(END_BARRIER, int(_end_timeout_s * 1000))
    except tf.errors.OpError:  # another member failed; its own exit code reports it
        return
    if _end_leader is not None:   # so its coordination service never sees this member go
        _while_reachable(_end_leader, OUTLIVE_LEADER_S, poll=0.1)


def _leader_address(cluster: ClusterConfig) -> str:
    """Where the all-reduce leader, which hosts the coordination service, serves: the
    chief, or worker 0 without one (as TensorFlow's multi_worker_util picks it)."""
    return (cluster.jobs.get("chief") or cluster.jobs["worker"])[0]


def _while_reachable(address: str, seconds: float, poll: float) -> None:
    """Wait until nothing listens at `address` (its process has ended), for at most
    `seconds`, looking every `poll` s."""
    ends = time.monotonic() + seconds
    while time.monotonic() < ends and reachable(address):
        time.sleep(poll)


def start_server(cluster: ClusterConfig):
    """Start this ps / worker task's gRPC server, with enough threads not to dead-lock."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        inter_op_parallelism_threads=max(MIN_INTER_OP_THREADS, os.cpu_count() or 1)
    )
    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster.training_jobs),
        job_name=cluster.task_type,
        task_index=cluster.task_index,
        protocol=cluster.rpc_layer or "grpc",
        config=config,
        start=True,
    )


def reachable(address: str, timeout: float = 1.0) -> bool:
    """Whether something listens at host:port."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def serve(cluster: ClusterConfig, startup_timeout: float, poll: float = 1.0,
          chief_files: tuple[str, str, str] | None = None) -> int:
    """Run this task's server until the chief has come and gone; returns the exit status.

    Gives up, naming the chief's address, if the chief is not reachable within
    `startup_timeout` seconds, so a job whose chief never starts does not hang forever.
    SIGTERM (preemption) returns PREEMPTED_EXIT_CODE once the chief has ended, at most
    TFYARD_SERVER_GRACE s (default 20) later: the chief, signalled too when the whole job
    is preempted, still needs the variables (ps) and its running closures (workers) to save.
    `chief_files` are the chief's lease, run.json and summary.json: when this task saw the
    lease or run.json (the run directory is shared; the lease alone may come and go between
    two looks) and the chief went without writing its summary, the chief was lost: one line
    and LOST_PEER_EXIT_CODE, so a Kubernetes Job restarts this member with the chief instead
    of counting it done.
    """
    started, grace = time.time(), envvars.number(SERVER_GRACE_ENV, SERVER_GRACE_S)
    start_server(cluster)
    terminated = _sigterm_event()
    me, chief = f"{cluster.role}:{cluster.task_index}", cluster.jobs["chief"][0]
    print(f"tfyard: {me} serving at {cluster.address}; waiting for chief {chief}", flush=True)
    deadline = time.monotonic() + startup_timeout
    while not reachable(chief) and not terminated.is_set():
        if time.monotonic() > deadline:
            raise UserError(
                f"chief at {chief} did not come up within {startup_timeout:.0f}s; start it or "
                "raise --startup_timeout"
            )
        time.sleep(poll)
    def chief_writes_here() -> bool:
        return bool(chief_files) and any(files_for(path).has(path) for path in chief_files[:2])

    misses, shared = 0, False
    while misses < 3 and not terminated.is_set():
        time.sleep(poll)
        misses = 0 if reachable(chief) else misses + 1
        shared = shared or chief_writes_here()
    if not terminated.is_set():
        if (shared or chief_writes_here()) and not chief_finished(chief_files[2], started):
            print(lost_line(f"chief:0 ({chief})", f"before it finished; {me} stops"),
                  file=sys.stderr, flush=True)
            return LOST_PEER_EXIT_CODE
        print(f"tfyard: chief {chief} has ended; {me} stops", file=sys.stderr, flush=True)
        return 0
    _while_reachable(chief, grace, poll / 4)
    print(f"tfyard: {me} got SIGTERM; stops (exit {PREEMPTED_EXIT_CODE}, safe to restart)",
          file=sys.stderr, flush=True)
    return PREEMPTED_EXIT_CODE


def chief_finished(summary: str, since: float) -> bool:
    """Whether the chief wrote its summary after `since`, other than a preemption's."""
    files = files_for(summary)
    try:
        if not files.has(summary) or files.modified(summary) < since:
            return False
        return json.loads(files.read_whole(summary)).get("stop_reason") != PREEMPTED
    except (OSError, ValueError, AttributeError):
        return False


def _sigterm_event():
    """An event SIGTERM sets, in place of dying at once (main thread only)."""
    import signal
    import threading

    event = threading.Event()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda _signum, _frame: event.set())
    return event
