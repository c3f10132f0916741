"""TensorFlowOnSpark-style entry point: `tfyard.spark.run(sc, main_fun, args, num_executors)`;
and `tfyard.spark.predict(df, run, top_k=5)`, a trained model's classes for a DataFrame of
images (`binaryFile`), lazily (the work is in `tfyard.predict.spark`).

`main_fun(argv, ctx)` runs once per cluster member, each in its own Python process on a
Spark executor, with TF_CONFIG set; `ctx` has `executor_id`, `job_name`, `task_index`,
`cluster_spec`, `num_workers` and `absolute_path(path)`. The work is in
`tfyard.launch.spark`.
"""

from __future__ import annotations

from tfyard.launch.context import Context
from tfyard.launch.spark import run_function
from tfyard.launch.supervise import MemberFailed
from tfyard.predict.spark import predict

__all__ = ["Context", "MemberFailed", "predict", "run"]


def run(sc, main_fun, args, num_executors: int, num_ps: int = 0, tensorboard: bool = False,
        log_dir: str | None = None) -> None:
    """Run `main_fun(args, ctx)` as a cluster of `num_executors` members (ps first, then chief,
    then workers); raises MemberFailed with the failing member's error."""
    run_function(sc, main_fun, args, num_executors, num_ps, tensorboard, log_dir)
