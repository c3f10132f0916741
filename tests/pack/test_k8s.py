"""The Kubernetes manifest: parsed back, and its bootstrap run for every pod index."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tfyard.cli import main
from tfyard.distribute.cluster import parse_tf_config
from tfyard.pack.k8s import job_name

PRINT_TF_CONFIG = "import os; print(os.environ['TF_CONFIG'])"


def _manifest(code_dir, k8s: str, *extra) -> dict:
    assert main(["pack", "--code_path", str(code_dir), "--main", "train.py", "--image",
                 "team/resnet_50:v1", "--k8s", k8s, "--train_params", "--steps 1",
                 *extra]) == 0
    text = (code_dir.parent / "tfyard-k8s.yaml").read_text()
    lines = text.splitlines()
    assert lines[0].startswith("#") and "kubectl apply" in lines[1]
    return json.loads("\n".join(line for line in lines if not line.startswith("#")))


def _pod_tf_config(container: dict, index: int) -> str:
    """Run the pod's command as Kubernetes would, with the training program swapped for a probe."""
    python, flag, bootstrap = container["command"][:3]
    assert (python, flag) == ("python", "-c")
    env = {item["name"]: item["value"] for item in container["env"]}
    env["JOB_COMPLETION_INDEX"] = str(index)
    probe = subprocess.run([sys.executable, "-c", bootstrap, sys.executable, "-c",
                            PRINT_TF_CONFIG], env=env, capture_output=True, text=True,
                           check=True)
    return probe.stdout


@pytest.mark.parametrize(("k8s", "roles"), [
    ("2,1", ["chief", "worker", "worker", "ps"]),
    ("3", ["worker", "worker", "worker"]),
])
def test_indexed_job_pods_compute_their_tf_config(code_dir, k8s, roles):
    manifest = _manifest(code_dir, k8s, "--gpu")
    service, job = manifest["items"]
    name = "resnet-50"
    assert (service["kind"], job["kind"]) == ("Service", "Job")
    assert service["metadata"]["name"] == job["metadata"]["name"] == name
    assert service["spec"]["clusterIP"] == "None"
    pod = job["spec"]["template"]
    assert service["spec"]["selector"] == pod["metadata"]["labels"]
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == len(roles)
    assert pod["spec"]["subdomain"] == name
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "team/resnet_50:v1"
    assert container["command"][3:] == ["python", "/data/train.py", "--steps", "1"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    port = service["spec"]["ports"][0]["port"]
    coordinators = 0
    for index, role in enumerate(roles):
        config = parse_tf_config(_pod_tf_config(container, index))
        assert config.role == role
        assert config.address == f"{name}-{index}.{name}:{port}"  # the pod's stable hostname
        coordinators += config.is_coordinator
    assert coordinators == 1


@pytest.mark.parametrize(("image", "name"), [
    ("registry.io:5000/a/b/my.model_v2:1", "my-model-v2"),
    ("team/3d-net", "tfyard-3d-net"),
])
def test_job_name_is_a_dns_label(image, name):
    assert job_name(image) == name


def test_preempted_pods_are_retried_without_counting_and_get_time_to_save(code_dir):
    from tfyard.errors import PREEMPTED_EXIT_CODE

    _, job = _manifest(code_dir, "2")["items"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    assert pod["terminationGracePeriodSeconds"] >= 30
    (container,) = pod["containers"]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onExitCodes": {"containerName": container["name"],
                                             "operator": "In",
                                             "values": [PREEMPTED_EXIT_CODE]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]},
    ]
    assert PREEMPTED_EXIT_CODE == 143
