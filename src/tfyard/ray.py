"""`tfyard.ray.run(main_fun, args, num_workers)`: the `tfyard.spark.run` of Ray.

`main_fun(argv, ctx)` runs once per cluster member, each in its own Python process, the
child of a Ray actor of one placement group, with TF_CONFIG set; `ctx` has `executor_id`,
`job_name`, `task_index`, `cluster_spec`, `num_workers` and `absolute_path(path)`. Uses the
Ray this process is connected to, else `ray.init(address)`. Needs the `ray` extra
(`pip install -e '.[ray]'` in a checkout); the work is in `tfyard.launch.ray`.
`tfyard.ray.predict(ds, run, top_k=5)` adds a trained model's classes to a Dataset of
images (`read_binary_files`, in `tfyard.predict.ray`).
"""

from __future__ import annotations

from tfyard.launch.attempt import Policy
from tfyard.launch.context import Context
from tfyard.launch.ray import Placement, run_function
from tfyard.launch.supervise import MemberFailed, Outcome
from tfyard.predict.ray import predict

__all__ = ["Context", "MemberFailed", "predict", "run"]


def run(main_fun, args, num_workers: int, num_ps: int = 0, chief: bool | None = None,
        evaluator: bool = False, address: str | None = None, cpus_per_member: float = 1.0,
        gpus_per_member: float = 0.0, strategy: str = "PACK", max_restarts: int = 0,
        hang_timeout: float = 0.0) -> Outcome:
    """Run `main_fun(args, ctx)` as a cluster: `num_ps` ps, a chief (by default when there
    are ps), `num_workers` workers, an optional evaluator; raises MemberFailed with the
    failing member's error once `max_restarts` are spent."""
    return run_function(main_fun, args, num_workers, num_ps, chief, evaluator, address,
                        Placement(cpus_per_member, gpus_per_member, strategy),
                        Policy(max_restarts=max_restarts, hang_timeout=hang_timeout))
