"""Who is in a cluster: its members in TensorFlowOnSpark's order and the TF_CONFIG each one
gets, whichever launcher starts them (local processes, Ray actors, Spark tasks)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tfyard.distribute.cluster import ClusterConfig, parse_tf_config
from tfyard.errors import UserError


@dataclass(frozen=True)
class Member:
    """One cluster member: its job name and index in that job."""

    job: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.job}:{self.index}"


def roster(workers: int, chief: bool = False, ps: int = 0,
           evaluator: bool = False) -> list[Member]:
    """Members in TensorFlowOnSpark's order: ps first, then chief, workers, evaluator."""
    if workers < 0 or ps < 0:
        raise UserError("--workers and --ps must be 0 or more")
    if ps and not chief:
        raise UserError("a parameter-server job needs a chief to coordinate; add --chief")
    if workers + chief < 1:
        raise UserError("the cluster has nobody to train; use --workers 1 or more (or --chief)")
    return ([Member("ps", i) for i in range(ps)] + [Member("chief", 0)] * chief
            + [Member("worker", i) for i in range(workers)]
            + [Member("evaluator", 0)] * evaluator)


def tf_configs(members: Sequence[Member], addresses: Sequence[str]) -> list[ClusterConfig]:
    """One validated ClusterConfig per member, given each member's host:port."""
    jobs: dict[str, list[str]] = {}
    for member, address in zip(members, addresses, strict=True):
        jobs.setdefault(member.job, []).append(address)
    ordered = {job: jobs[job] for job in ("chief", "worker", "ps", "evaluator") if job in jobs}
    return [parse_tf_config({"cluster": ordered, "task": {"type": m.job, "index": m.index}})
            for m in members]
