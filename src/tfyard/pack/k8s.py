"""A Kubernetes manifest: one indexed Job and the headless Service that names its pods.

Pod `i` of an indexed Job whose `subdomain` is the Service is reachable as
`<job>-<i>.<service>`, so the whole cluster is known before any pod starts. Each pod runs
BOOTSTRAP first: it picks its own task from JOB_COMPLETION_INDEX, exports TF_CONFIG and
execs the training command. The file is JSON, which is also YAML, so `kubectl apply -f`
takes it and tests can read it without a YAML library. Every field is one that the API
servers of Kubernetes 1.29 and later accept (tests/pack/test_k8s_schema.py checks each).
"""

from __future__ import annotations

import json

from tfyard.errors import LOST_PEER_EXIT_CODE, PREEMPTED_EXIT_CODE
from tfyard.pack.commands import mounted_command
from tfyard.pack.k8s_spec import K8sSpec, Volume, job_name
from tfyard.pack.owned import HEADER
from tfyard.pack.spec import DATA_DIR, OUTPUT_DIR, PackSpec

PORT = 2222
# SIGTERM first, SIGKILL this long after: time for a member to save at the current step.
TERMINATION_GRACE_S = 60
MANIFEST_FILE = "tfyard-k8s.yaml"
CONTAINER = "train"
# Kueue (kueue.sigs.k8s.io) admits a Job that carries its queue's label and is created suspended.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"

# Runs as `python -c BOOTSTRAP CMD...` in every pod; task i is the i-th address in cluster order.
BOOTSTRAP = """\
import json, os, sys
cluster = json.loads(os.environ["TFYARD_CLUSTER"])
tasks = [(job, i) for job, hosts in cluster.items() for i in range(len(hosts))]
job, index = tasks[int(os.environ["JOB_COMPLETION_INDEX"])]
os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
os.execvp(sys.argv[1], sys.argv[1:])
"""


def cluster_spec(k8s: K8sSpec) -> dict[str, list[str]]:
    """TF_CONFIG.cluster: pod i (its stable host name) is address i."""
    cluster, index = {}, 0
    for role, count in k8s.roles.items():
        cluster[role] = [f"{k8s.name}-{index + i}.{k8s.name}:{PORT}" for i in range(count)]
        index += count
    return cluster


def selector(k8s: K8sSpec) -> dict[str, str]:
    """The labels of this job's pods and only them: the Service's selector, `kubectl -l`."""
    return {"app.kubernetes.io/instance": k8s.name, "app.kubernetes.io/managed-by": "tfyard"}


def _retry_preemptions() -> dict:
    """A pod that saved and exited PREEMPTED_EXIT_CODE after SIGTERM, one that exited
    LOST_PEER_EXIT_CODE because another member was lost (that member's own pod is judged
    by its own exit), or one that Kubernetes evicted or preempted (DisruptionTarget), is
    replaced without counting against backoffLimit; every other failure counts (and fails
    the Job, backoffLimit being 0). Before 1.35 a pod-condition pattern needs its `status`."""
    return {"rules": [
        {"action": "Ignore", "onExitCodes": {"containerName": CONTAINER, "operator": "In",
                                             "values": [LOST_PEER_EXIT_CODE,
                                                        PREEMPTED_EXIT_CODE]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                  "status": "True"}]},
    ]}


def _kueue_labels(k8s: K8sSpec) -> dict[str, str]:
    """The Job's labels that put it in a Kueue queue (and give its priority there)."""
    labels = {QUEUE_LABEL: k8s.queue} if k8s.queue else {}
    if k8s.priority_class:
        labels[PRIORITY_LABEL] = k8s.priority_class
    return labels


def _mounts(k8s: K8sSpec) -> list[tuple[str, str, str, bool, Volume | None]]:
    """(name, mount path, flag, read-only, the volume if given): each at the path that the
    command's --data_dir or --output_dir names; only the output is written, and a run in a
    bucket needs no output volume."""
    return [("data", DATA_DIR, "--data_volume", True, k8s.data_volume)] + (
        [] if k8s.output_url else
        [("output", OUTPUT_DIR, "--output_volume", False, k8s.output_volume)])


def _volume(name: str, volume: Volume, read_only: bool) -> dict:
    if volume.kind == "pvc":
        return {"name": name, "persistentVolumeClaim": {"claimName": volume.source}}
    kind = "Directory" if read_only else "DirectoryOrCreate"
    return {"name": name, "hostPath": {"path": volume.source, "type": kind}}


def _volumes(k8s: K8sSpec) -> tuple[list[dict], list[dict]]:
    """The pod's volumes and the container's mounts of them, for the volumes given."""
    volumes, mounts = [], []
    for name, path, _, read_only, volume in _mounts(k8s):
        if volume:
            volumes.append(_volume(name, volume, read_only))
            mounts.append({"name": name, "mountPath": path, "readOnly": read_only})
    return volumes, mounts


def _resources(spec: PackSpec) -> dict:
    requests = {key: value for key, value in (("cpu", spec.k8s.cpus),
                                              ("memory", spec.k8s.memory)) if value}
    resources = {"requests": requests} if requests else {}
    if spec.gpu:
        resources["limits"] = {"nvidia.com/gpu": 1}
    return resources


def _header(spec: PackSpec) -> str:
    """What the file holds, the volume flags it still lacks, and the kubectl commands."""
    k8s = spec.k8s
    members = ", ".join(f"{count} {role}" for role, count in k8s.roles.items())
    lines = [f"{HEADER.removeprefix('# ')}: Job {k8s.name}, {k8s.pods} pods of {spec.image} "
             f"({members}), and its headless Service."]
    for name, path, flag, read_only, volume in _mounts(k8s):
        if volume:
            access = " (read-only)" if read_only else ""
            lines.append(f"{name.capitalize()}: {volume.kind}:{volume.source} at {path}{access}.")
        else:
            shared = "" if read_only else ", one volume that every pod can reach"
            lines.append(f"No {name} volume: rerun pack with {flag} pvc:CLAIM or host:/PATH "
                         f"to mount one at {path}{shared}.")
    if k8s.output_url:
        lines.append(f"Output: {k8s.output_url}, written by the chief through a copy on its "
                     "disk (no output volume).")
    if k8s.tracking:
        lines.append("Tracking: " + ", ".join(f"{name}={value}" for name, value in k8s.tracking)
                     + " (from this shell); the chief logs the run to MLflow.")
    if k8s.credentials_secret:
        lines.append(f"Credentials: every key of Secret {k8s.credentials_secret} is an "
                     "environment variable of each pod (AWS_ACCESS_KEY_ID, "
                     "AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3, ...).")
    waits = ""
    if k8s.queue:
        priority = f", priority {k8s.priority_class}" if k8s.priority_class else ""
        lines.append(f"Queue: Kueue's LocalQueue {k8s.queue}{priority}; the Job is created "
                     "suspended and its pods start when Kueue admits it.")
        waits = f"  # queued: the Job waits in {k8s.queue} until Kueue admits it"
    ns = f" -n {k8s.namespace}" if k8s.namespace else ""
    pods = ",".join(f"{key}={value}" for key, value in selector(k8s).items())
    lines += [
        f"Start:          kubectl apply -f {MANIFEST_FILE}{waits}",
        f"Watch the job:  kubectl get job {k8s.name}{ns} -w",
        f"Watch the pods: kubectl get pods{ns} -l {pods} -w",
        f"Follow logs:    kubectl logs{ns} -l {pods} -f --prefix --tail=-1 "
        f"--max-log-requests {k8s.pods}",
        f"Remove:         kubectl delete -f {MANIFEST_FILE}",
    ]
    return "".join(f"# {line}\n" for line in lines)


def render_manifest(spec: PackSpec) -> str:
    k8s = spec.k8s
    cluster = cluster_spec(k8s)
    labels = {"app.kubernetes.io/name": job_name(spec.image), **selector(k8s)}
    namespace = {"namespace": k8s.namespace} if k8s.namespace else {}
    metadata = {"name": k8s.name, **namespace, "labels": labels}
    volumes, mounts = _volumes(k8s)
    container = {
        "name": CONTAINER,
        "image": spec.image,
        "command": ["python", "-c", BOOTSTRAP,
                    *mounted_command(spec, k8s.output_url or OUTPUT_DIR)],
        "env": [{"name": "TFYARD_CLUSTER", "value": json.dumps(cluster)},
                *({"name": name, "value": value} for name, value in k8s.tracking)],
        "ports": [{"name": "grpc", "containerPort": PORT}],
    }
    if k8s.credentials_secret:
        container["envFrom"] = [{"secretRef": {"name": k8s.credentials_secret}}]
    resources = _resources(spec)
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": metadata,
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": selector(k8s), "ports": [{"name": "grpc", "port": PORT}]},
    }
    pod = {"subdomain": k8s.name, "restartPolicy": "Never",
           "terminationGracePeriodSeconds": TERMINATION_GRACE_S, "containers": [container]}
    if volumes:
        pod["volumes"] = volumes
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {**metadata, "labels": {**labels, **_kueue_labels(k8s)}},
        "spec": {
            "completionMode": "Indexed", "completions": k8s.pods, "parallelism": k8s.pods,
            "backoffLimit": 0,
            "podFailurePolicy": _retry_preemptions(),
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    if k8s.queue:
        job["spec"]["suspend"] = True   # Kueue unsuspends it once admitted
    manifest = {"apiVersion": "v1", "kind": "List", "items": [service, job]}
    return _header(spec) + json.dumps(manifest, indent=2) + "\n"
