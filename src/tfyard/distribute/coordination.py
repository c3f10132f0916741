"""What the members of an all-reduce cluster agree on through TensorFlow's coordination
service once their strategy has formed the cluster: the id of this start (`cluster_start`),
the chief's word on a setting (`chiefs_word`), and leaving together at a normal end
(`end_together`, armed by `strategy.create_strategy` through `meet_at_end`).
"""

from __future__ import annotations

from tfyard.distribute.cluster import ClusterConfig
from tfyard.distribute.server import while_reachable
from tfyard.errors import UserError
from tfyard.process import envvars

# The all-reduce members meet here at a normal end (see end_together).
END_BARRIER = "tfyard_end_of_job"
END_TIMEOUT_ENV, END_TIMEOUT_S = "TFYARD_END_TIMEOUT", 3600.0
START_KEY = "tfyard_cluster_start"   # the coordinator's id of this start (`cluster_start`)
_end_timeout_s: float | None = None   # set on an all-reduce member: how long end_together waits
_end_leader: str | None = None   # set on an all-reduce member but the leader: the leader's address
# After the end barrier a member outlives the leader, polling its address, for at most this long.
OUTLIVE_LEADER_S = 60.0


def meet_at_end(cluster: ClusterConfig) -> None:
    """On an all-reduce member: `end_together` waits at the end barrier, and past it every
    member but the leader stays while the leader's address answers."""
    global _end_timeout_s, _end_leader
    _end_timeout_s = envvars.number(END_TIMEOUT_ENV, END_TIMEOUT_S)
    _end_leader = None if cluster.is_coordinator else _leader_address(cluster)


def cluster_start(plan, cluster: ClusterConfig, chief_id: str | None,
                  timeout: float) -> str | None:
    """The id every member of this start of an all-reduce cluster shares: the coordinator's
    `chief_id`, which the others read from the cluster's coordination service. Called once
    the strategy has formed the cluster, so a member gets the id of the chief it started
    with, never one of another start (a replaced pod's old chief, still running, is in no
    cluster with it). None for the other strategies (their other members write no run).
    `plan` is the `strategy.Plan` (not annotated: `strategy` imports this module)."""
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
        while_reachable(_end_leader, OUTLIVE_LEADER_S, poll=0.1)


def _leader_address(cluster: ClusterConfig) -> str:
    """Where the all-reduce leader, which hosts the coordination service, serves: the
    chief, or worker 0 without one (as TensorFlow's multi_worker_util picks it)."""
    return (cluster.jobs.get("chief") or cluster.jobs["worker"])[0]
