"""TF_CONFIG: parse, translate the legacy `master` job to `chief`, validate, give the role.

Pure Python on purpose (no TensorFlow import): `tfyard cluster show` must start fast and
bad configurations must be refused before any server starts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tfyard.errors import UserError

JOB_TYPES = ("chief", "worker", "ps", "evaluator")
ROLES = ("single", "chief", "worker", "ps", "evaluator")
_LEGACY = {"master": "chief"}
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
_HINT = "see `tfyard cluster show --help` for the expected shape"


@dataclass(frozen=True)
class ClusterConfig:
    """One task's view of its cluster, in TF 2 form (`chief`, never `master`)."""

    jobs: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    task_type: str | None = None
    task_index: int = 0
    rpc_layer: str | None = None
    environment: str | None = None

    @property
    def role(self) -> str:
        """single, chief, worker, ps or evaluator."""
        return self.task_type or "single"

    @property
    def has_ps(self) -> bool:
        return bool(self.jobs.get("ps"))

    @property
    def training_jobs(self) -> dict[str, list[str]]:
        """The jobs that take part in training (the evaluator is a side-car)."""
        return {k: list(v) for k, v in self.jobs.items() if k != "evaluator"}

    @property
    def num_workers(self) -> int:
        """Members that compute gradients: chief + workers for all-reduce, workers under PS."""
        workers = len(self.jobs.get("worker", ()))
        return workers if self.has_ps else workers + len(self.jobs.get("chief", ()))

    @property
    def is_coordinator(self) -> bool:
        """Whether this task writes shared files and drives the job."""
        if self.role == "single":
            return True
        if self.role == "chief":
            return True
        return self.role == "worker" and self.task_index == 0 and "chief" not in self.jobs \
            and not self.has_ps

    @property
    def address(self) -> str | None:
        """This task's own host:port, if the cluster lists it."""
        addresses = self.jobs.get(self.task_type or "", ())
        return addresses[self.task_index] if self.task_index < len(addresses) else None

    def to_tf_config(self) -> dict:
        """The JSON-ready TF_CONFIG that TensorFlow 2 accepts."""
        if self.task_type is None:
            return {}
        out: dict = {
            "cluster": {k: list(v) for k, v in self.jobs.items()},
            "task": {"type": self.task_type, "index": self.task_index},
        }
        if self.rpc_layer:
            out["rpc_layer"] = self.rpc_layer
        if self.environment:
            out["environment"] = self.environment
        return out


SINGLE = ClusterConfig()


def parse_tf_config(text: str | Mapping | None, source: str = "TF_CONFIG") -> ClusterConfig:
    """Parse TF_CONFIG (JSON text or a decoded dict) into a validated ClusterConfig;
    `source` names where the text came from in a JSON error."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return SINGLE
    if isinstance(text, str):
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(
                f"{source} is not valid JSON ({exc.msg} at line {exc.lineno} column "
                f"{exc.colno}); {_HINT}"
            ) from None
    else:
        raw = text
    if not isinstance(raw, Mapping):
        raise UserError(f"TF_CONFIG must be a JSON object, got {type(raw).__name__}; {_HINT}")
    unknown = set(raw) - {"cluster", "task", "rpc_layer", "environment"}
    if unknown:
        raise UserError(
            f"TF_CONFIG has unknown key(s) {sorted(map(str, unknown))}; allowed: cluster, task, "
            "rpc_layer, environment"
        )
    jobs = _parse_jobs(raw.get("cluster", {}))
    task_type, task_index = _parse_task(raw.get("task"), jobs)
    rpc_layer = _optional_str(raw, "rpc_layer")
    environment = _optional_str(raw, "environment")
    if not jobs:
        if task_type is not None:
            raise UserError(
                f"TF_CONFIG task.type is {task_type!r} but cluster is empty; list the cluster's "
                "members in TF_CONFIG.cluster or unset TF_CONFIG"
            )
        return ClusterConfig(rpc_layer=rpc_layer, environment=environment)
    if task_type is None:
        raise UserError("TF_CONFIG has a cluster but no task; add \"task\": {\"type\": ..., "
                        "\"index\": ...}")
    if jobs.get("ps") and not jobs.get("chief"):
        raise UserError(
            "TF_CONFIG.cluster has ps tasks but no chief (or master); a parameter-server job "
            "needs one chief to coordinate: add a \"chief\" entry"
        )
    return ClusterConfig(
        jobs=MappingProxyType(jobs),
        task_type=task_type,
        task_index=task_index,
        rpc_layer=rpc_layer,
        environment=environment,
    )


def _optional_str(raw: Mapping, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, str):
        raise UserError(f"TF_CONFIG.{key} must be a string, got {json.dumps(value)[:40]}")
    return value or None


def _parse_jobs(cluster) -> dict[str, tuple[str, ...]]:
    if not isinstance(cluster, Mapping):
        raise UserError(
            "TF_CONFIG.cluster must map job names to lists of \"host:port\"; "
            f"got {type(cluster).__name__}"
        )
    jobs: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for name, addresses in cluster.items():
        job = _LEGACY.get(name, name)
        if job not in JOB_TYPES:
            raise UserError(
                f"TF_CONFIG.cluster has unknown job type {str(name)!r}; use chief (or master), "
                "worker, ps or evaluator"
            )
        if job in jobs:
            raise UserError(
                "TF_CONFIG.cluster names both 'master' and 'chief'; they are the same job, "
                "keep one"
            )
        if isinstance(addresses, str):
            addresses = [addresses]
        if not isinstance(addresses, list | tuple):
            raise UserError(
                f"TF_CONFIG.cluster.{name} must be a list of \"host:port\" strings"
            )
        if job in ("chief", "evaluator") and len(addresses) > 1:
            raise UserError(
                f"TF_CONFIG.cluster.{name} lists {len(addresses)} tasks; at most one {job} is "
                "allowed, move the others to worker"
            )
        for i, address in enumerate(addresses):
            if not isinstance(address, str) or not _valid_host_port(address):
                raise UserError(
                    f"TF_CONFIG.cluster.{name}[{i}] = {json.dumps(address)[:60]} is not "
                    "\"host:port\" (port 1-65535); fix that address"
                )
            if address in seen:
                raise UserError(
                    f"TF_CONFIG.cluster.{name}[{i}] = {address!r} is also {seen[address]}; "
                    "every task needs its own address"
                )
            seen[address] = f"{name}[{i}]"
        if addresses:
            jobs[job] = tuple(addresses)
    return jobs


def _valid_host_port(address: str) -> bool:
    match = _HOST_PORT.match(address)
    return bool(match) and 0 < int(match.group(2)) <= 65535


def _parse_task(task, jobs: Mapping[str, tuple[str, ...]]) -> tuple[str | None, int]:
    if task is None or task == {}:
        return None, 0
    if not isinstance(task, Mapping):
        raise UserError(
            "TF_CONFIG.task must be an object like {\"type\": \"worker\", \"index\": 0}"
        )
    raw_type = task.get("type")
    if not isinstance(raw_type, str):
        raise UserError(
            "TF_CONFIG.task.type is missing or not a string; set it to chief, worker, ps or "
            "evaluator"
        )
    task_type = _LEGACY.get(raw_type, raw_type)
    if task_type not in JOB_TYPES:
        raise UserError(
            f"TF_CONFIG.task.type {raw_type!r} is unknown; use chief (or master), worker, ps or "
            "evaluator"
        )
    index = task.get("index", 0)
    if isinstance(index, str) and index.isdecimal():   # "²" is a digit int() refuses
        index = int(index)
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise UserError(
            f"TF_CONFIG.task.index {json.dumps(index)[:40]} must be a non-negative integer"
        )
    if task_type == "evaluator" and task_type not in jobs:
        if index != 0:
            raise UserError("TF_CONFIG.task.index must be 0 for the evaluator")
        return task_type, index
    if jobs and task_type not in jobs:
        raise UserError(
            f"TF_CONFIG.task.type {raw_type!r} is not a job in TF_CONFIG.cluster "
            f"({', '.join(jobs)}); add it to the cluster or fix the task type"
        )
    if jobs and index >= len(jobs[task_type]):
        raise UserError(
            f"TF_CONFIG.task.index {index} is out of range: cluster.{task_type} has "
            f"{len(jobs[task_type])} task(s), so use 0..{len(jobs[task_type]) - 1}"
        )
    return task_type, index


def tf_config_from_legacy_flags(ps_hosts: str | None, worker_hosts: str, job_name: str | None,
                                task_index: int) -> dict:
    """TF 1 `--ps_hosts --worker_hosts --job_name --task_index` as a TF 2 TF_CONFIG.

    TF 1 made worker 0 the chief; TF 2 wants a separate `chief` job, so with ps tasks
    worker 0 becomes `chief` and the other workers shift down by one.
    """
    workers = [h for h in worker_hosts.split(",") if h]
    ps = [h for h in (ps_hosts or "").split(",") if h]
    if job_name not in ("worker", "ps"):
        raise UserError(f"--job_name {job_name!r} must be worker or ps")
    cluster: dict = {"worker": workers}
    task = {"type": job_name, "index": task_index}
    if ps:
        cluster = {"chief": workers[:1], "worker": workers[1:], "ps": ps}
        if job_name == "worker":
            task = {"type": "chief", "index": 0} if task_index == 0 else \
                {"type": "worker", "index": task_index - 1}
    config = {"cluster": {k: v for k, v in cluster.items() if v}, "task": task}
    parse_tf_config(config)
    return config


def load_cluster_config(environ: Mapping[str, str] | None = None) -> ClusterConfig:
    """Read TF_CONFIG from the environment, or from the file named by TF_CONFIG_FILE.

    Both set is fine while they describe the same task (tfyard exports the file's
    translated form into TF_CONFIG); otherwise one of them would be silently ignored."""
    env = os.environ if environ is None else environ
    text = env.get("TF_CONFIG")
    path = env.get("TF_CONFIG_FILE")
    if not path:
        return parse_tf_config(text)
    try:
        with open(path, encoding="utf-8") as handle:
            from_file = parse_tf_config(handle.read(), f"TF_CONFIG_FILE {path!r}")
    except OSError as exc:
        raise UserError(
            f"TF_CONFIG_FILE {path!r} cannot be read ({exc.strerror}); fix the path or unset it"
        ) from None
    except UnicodeDecodeError:
        raise UserError(f"TF_CONFIG_FILE {path!r} is not UTF-8 text; write it as JSON") from None
    if text and text.strip() and parse_tf_config(text) != from_file:
        raise UserError(
            f"TF_CONFIG and TF_CONFIG_FILE ({path!r}) are both set and describe different "
            "tasks; unset one of them")
    return from_file


def export_tf_config(config: ClusterConfig, environ=None) -> None:
    """Put the translated TF 2 form into TF_CONFIG so TensorFlow's own resolvers agree."""
    env = os.environ if environ is None else environ
    if config.task_type is None:
        env.pop("TF_CONFIG", None)
    else:
        env["TF_CONFIG"] = json.dumps(config.to_tf_config())


_SECRET_KEY = re.compile(r"(pass|secret|token|key|credential|auth)", re.IGNORECASE)


def mask_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """Copy of an environment with values of secret-looking names replaced by ***."""
    return {k: ("***" if _SECRET_KEY.search(k) and v else v) for k, v in environ.items()}
