"""Role + devices -> what this process does: train under a strategy, serve, or evaluate.

`choose()` is pure (no TensorFlow) so the decision can be shown and tested cheaply;
`create_strategy()` builds the TensorFlow strategy. What the members agree on once it has
formed the cluster is `distribute.coordination`; a ps or PS worker's serving is
`distribute.server`; the devices a member trains on are named by `distribute.devices`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from tfyard.distribute import coordination
from tfyard.distribute.cluster import ClusterConfig, export_tf_config
from tfyard.distribute.devices import shares_a_card
from tfyard.errors import UserError

STRATEGIES = ("off", "one_device", "mirrored", "multi_worker_mirrored", "parameter_server")


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
        coordination.meet_at_end(cluster)
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
