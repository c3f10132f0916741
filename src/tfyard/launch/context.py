"""What a Python-API member function learns about its place in the cluster, and how it is
started: `main_fun` and its args travel pickled to the member's host, whose child process
(`python -m tfyard.launch.context FILE`) calls `main_fun(argv, ctx)`. Used by
`tfyard.spark.run` and `tfyard.ray.run`.
"""

from __future__ import annotations

import os
import pickle
import sys
from dataclasses import dataclass

from tfyard.platform import MAX_STEPS
from tfyard.storage import scheme_of, stores

PAYLOAD_MODULE = "tfyard.launch.context"
# Driver environment that members also get, wherever their executor or actor runs: these
# names (TensorFlow's op threads: a member's share of its node, as tune sets it; the step cap,
# which holds every run), MLflow's settings (a tracked run's chief logs from its executor or
# actor) and the stores' (a run or data in a bucket is reached as the driver reaches it).
PASS_THROUGH = ("TFYARD_STARTUP_TIMEOUT", "TF_CPP_MIN_LOG_LEVEL", "TF_NUM_INTRAOP_THREADS",
                MAX_STEPS)
PASS_PREFIXES = ("MLFLOW_", *stores.SETTINGS)


# The driver's alone: a node's own value never holds (a long-lived Spark executor or Ray
# worker started under another run's step cap would hold this run to it).
DRIVERS_ONLY = (MAX_STEPS,)


def passed_env() -> dict[str, str]:
    """The driver's environment that every member gets (secrets among them: never print)."""
    return {name: value for name, value in os.environ.items()
            if name in PASS_THROUGH or name.startswith(PASS_PREFIXES)}


def on_node(passed: dict[str, str]) -> dict[str, str]:
    """A member's environment on its executor or actor: the node's, `passed` (the driver's,
    `passed_env`) over it, and the names only the driver decides exactly as it has them."""
    env = {**os.environ, **passed}
    for name in DRIVERS_ONLY:
        if name not in passed:
            env.pop(name, None)
    return env


@dataclass(frozen=True)
class Context:
    """What `main_fun(argv, ctx)` learns about its place in the cluster (as in TFoS)."""

    executor_id: int
    job_name: str
    task_index: int
    cluster_spec: dict
    num_workers: int
    working_dir: str

    def absolute_path(self, path: str) -> str:
        """`path` made absolute against the driver's working directory; URLs stay as they are."""
        if scheme_of(path) is not None or os.path.isabs(path):
            return path
        return os.path.join(self.working_dir, path)


def write_payload(directory: str, payload: bytes, ctx: Context) -> str:
    """Write the pickled (main_fun, args) and the member's context; returns the file."""
    path = os.path.join(directory, "member.pickle")
    with open(path, "wb") as handle:
        pickle.dump((payload, ctx), handle)
    return path


def run_payload(path: str) -> None:
    """Child process of a member: unpickle `main_fun` and its args, call it with the context."""
    with open(path, "rb") as handle:
        payload, ctx = pickle.load(handle)
    main_fun, argv = pickle.loads(payload)
    main_fun(argv, ctx)


if __name__ == "__main__":
    run_payload(sys.argv[1])
