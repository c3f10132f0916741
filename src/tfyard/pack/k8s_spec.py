"""The --k8s request, validated up front: names, volumes and resources as the API server
checks them, so a mistake is one line here instead of a refusal from `kubectl apply`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import PurePosixPath

from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG
from tfyard.storage import location, scheme_of

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
# The Job's name also names its Service, whose name must start with a letter (DNS-1035).
_SERVICE_NAME = re.compile(r"[a-z](?:[-a-z0-9]*[a-z0-9])?")
_NAMESPACE = re.compile(_LABEL)
_CLAIM = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_MAX_LABEL = 63
# Kubernetes quantities: CPUs as cores or millicores, memory in bytes with an optional suffix.
_CPUS = re.compile(r"(?:\d+(?:\.\d+)?|\.\d+|\d+m)")
_MEMORY = re.compile(r"(?:\d+(?:\.\d+)?)(?:[KMGTPE]i|[kMGTPE])?")


@dataclass(frozen=True)
class Volume:
    """A PersistentVolumeClaim (`kind` "pvc", `source` its name) or a node's directory
    (`kind` "host", `source` an absolute path)."""

    kind: str
    source: str


@dataclass(frozen=True)
class K8sSpec:
    """One Indexed Job and its headless Service, all named `name`."""

    workers: int
    ps: int
    name: str
    namespace: str | None = None
    cpus: str | None = None
    memory: str | None = None
    data_volume: Volume | None = None
    output_volume: Volume | None = None
    output_url: str | None = None   # the run in a bucket instead of an output volume
    credentials_secret: str | None = None   # a Secret whose keys become the pods' environment
    tracking: tuple[tuple[str, str], ...] = ()   # MLflow's settings given to every pod
    queue: str | None = None   # Kueue's LocalQueue: the Job waits, suspended, for admission
    priority_class: str | None = None   # Kueue's WorkloadPriorityClass for the queued Job

    @property
    def roles(self) -> dict[str, int]:
        return member_counts(self.workers, self.ps)

    @property
    def pods(self) -> int:
        return sum(self.roles.values())


def member_counts(workers: int, ps: int) -> dict[str, int]:
    """Members per TF_CONFIG job in pod-index order: all-reduce workers, or a chief, workers
    and parameter servers."""
    return {"chief": 1, "worker": workers, "ps": ps} if ps else {"worker": workers}


def make_k8s_spec(k8s: str | None, image: str, name: str | None = None,
                  namespace: str | None = None, cpus: str | None = None,
                  memory: str | None = None, data_volume: str | None = None,
                  output_volume: str | None = None, output_dir: str | None = None,
                  credentials_secret: str | None = None, queue: str | None = None,
                  priority_class: str | None = None) -> K8sSpec | None:
    """The checked request, or None without --k8s (then no Kubernetes flag may be given)."""
    given = {"--name": name, "--namespace": namespace, "--cpus": cpus, "--memory": memory,
             "--data_volume": data_volume, "--output_volume": output_volume,
             OUTPUT_FLAG: output_dir, "--credentials_secret": credentials_secret,
             "--queue": queue, "--priority_class": priority_class}
    if not k8s:
        extra = [flag for flag, value in given.items() if value is not None]
        if extra:
            raise UserError(f"{extra[0]} is for the Kubernetes manifest; add --k8s WORKERS[,PS]")
        return None
    workers, ps = parse_k8s(k8s)
    if name is not None:
        _check_name(name, sum(member_counts(workers, ps).values()))
    if namespace is not None and not (_NAMESPACE.fullmatch(namespace)
                                      and len(namespace) <= _MAX_LABEL):
        raise UserError(f"--namespace {namespace!r} is not a valid namespace: use at most 63 "
                        "lowercase letters, digits and '-', starting and ending with a letter "
                        "or digit")
    return K8sSpec(
        workers, ps, name or job_name(image), namespace,
        cpus=_quantity(cpus, _CPUS, "--cpus", "CPUs per pod, such as 4, 0.5 or 500m"),
        memory=_quantity(memory, _MEMORY, "--memory", "memory per pod, such as 16Gi or 512Mi"),
        data_volume=parse_volume("--data_volume", data_volume),
        output_volume=parse_volume("--output_volume", output_volume),
        output_url=_bucket(output_dir, output_volume),
        credentials_secret=_secret(credentials_secret),
        tracking=_tracking(),
        queue=_kueue_name("--queue", queue, "a LocalQueue"),
        priority_class=_priority_class(priority_class, queue),
    )


def _kueue_name(flag: str, name: str | None, what: str) -> str | None:
    """A name Kueue reads from a label: an object's name (DNS-1123 subdomain) that is also
    a label value (63 characters at most), as Kueue's webhook checks it."""
    if name is not None and not (_CLAIM.fullmatch(name) and len(name) <= _MAX_LABEL):
        raise UserError(f"{flag} {name!r} is not {what}'s name as Kueue takes it: use at most "
                        "63 lowercase letters, digits, '-' and '.', starting and ending with a "
                        "letter or digit")
    return name


def _priority_class(name: str | None, queue: str | None) -> str | None:
    if name is not None and queue is None:
        raise UserError(f"--priority_class {name} is Kueue's and orders queued Jobs; add "
                        "--queue NAME (the LocalQueue the Job waits in)")
    return _kueue_name("--priority_class", name, "a WorkloadPriorityClass")


def _tracking() -> tuple[tuple[str, str], ...]:
    """MLflow's server and experiment from the packing shell, for the chief's pod to log to;
    a URI holding a password is refused (credentials belong in the Secret)."""
    from tfyard import tracking

    uri = os.environ.get(tracking.URI_ENV)
    if uri and tracking.redacted(uri) != uri:
        raise UserError(f"{tracking.URI_ENV} holds credentials, which a manifest must not; "
                        "give the URI without them and put MLFLOW_TRACKING_TOKEN (or "
                        "MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD) in the Secret "
                        "named by --credentials_secret")
    return tuple((name, os.environ[name]) for name in (tracking.URI_ENV, tracking.EXPERIMENT_ENV)
                 if os.environ.get(name))


def _bucket(output_dir: str | None, output_volume: str | None) -> str | None:
    """--output_dir for the pods: a bucket URL, which then replaces the output volume."""
    if output_dir is None:
        return None
    if scheme_of(output_dir) is None:
        raise UserError(f"--output_dir {output_dir!r}: a pod's own disk does not outlive it; "
                        "give s3:// or gs://BUCKET/PREFIX, or mount a volume with --output_volume")
    place = location(output_dir, OUTPUT_FLAG)
    if output_volume is not None:
        raise UserError(f"--output_dir {output_dir} and --output_volume both name the run's "
                        "place; give one")
    return str(place)


def _secret(name: str | None) -> str | None:
    if name is not None and not (_CLAIM.fullmatch(name) and len(name) <= 253):
        raise UserError(f"--credentials_secret {name!r} is not a Secret's name: lowercase "
                        "letters, digits, '-' and '.'")
    return name


def parse_k8s(text: str) -> tuple[int, int]:
    """`WORKERS[,PS]` -> (workers, ps)."""
    parts = text.split(",")
    if len(parts) <= 2 and all(p.strip().isdecimal() for p in parts):
        workers, ps = int(parts[0]), int(parts[1]) if len(parts) == 2 else 0
        if workers >= 1:
            return workers, ps
    raise UserError(f"--k8s {text!r} must be WORKERS[,PS] with at least one worker, "
                    "e.g. 2 or 2,1")


def job_name(image: str) -> str:
    """A DNS-1035 label from the image's last path component (`team/res-net:1` -> `res-net`);
    50 characters at most, which leaves room for any pod index in the pods' host names."""
    last = image.rsplit("/", 1)[-1].split(":", 1)[0]
    name = re.sub(r"[^a-z0-9]+", "-", last.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"tfyard-{name}"
    return name[:50].rstrip("-")


def _check_name(name: str, pods: int) -> None:
    """Pod i's host name is `<name>-<i>`, a DNS label too: the index counts in the length."""
    longest = _MAX_LABEL - len(f"-{pods - 1}")
    if not (_SERVICE_NAME.fullmatch(name) and len(name) <= longest):
        raise UserError(f"--name {name!r} is not a valid Kubernetes name: use at most "
                        f"{longest} lowercase letters, digits and '-', starting with a letter "
                        "and ending with a letter or digit (it names the Job, its Service and, "
                        "with the pod index, each pod)")


def _quantity(value: str | None, pattern: re.Pattern, flag: str, what: str) -> str | None:
    """A positive Kubernetes quantity (some digit is not 0), kept as written."""
    if value is not None and not (pattern.fullmatch(value) and any(c in "123456789"
                                                                   for c in value)):
        raise UserError(f"{flag} {value!r} is not a positive Kubernetes quantity; give {what}")
    return value


def parse_volume(flag: str, text: str | None) -> Volume | None:
    """`pvc:CLAIM` or `host:/PATH`, checked as the API server checks claim names and paths."""
    if text is None:
        return None
    kind, _, source = text.partition(":")
    if kind == "pvc" and not (_CLAIM.fullmatch(source) and len(source) <= 253):
        raise UserError(f"{flag} {text!r}: {source!r} is not a claim name; a "
                        "PersistentVolumeClaim's name is lowercase letters, digits, '-' and '.'")
    if kind == "host" and not (source.startswith("/") and
                               ".." not in PurePosixPath(source).parts):
        raise UserError(f"{flag} {text!r}: {source!r} is not an absolute path without '..'; "
                        "give the directory on the node, such as host:/mnt/shared/runs")
    if kind not in ("pvc", "host"):
        raise UserError(f"{flag} {text!r} must be pvc:CLAIM (a PersistentVolumeClaim) or "
                        "host:/PATH (a directory on the node)")
    return Volume(kind, source)
