"""The Kubernetes manifest: parsed back, its bootstrap run for every pod index, its volumes
at the paths the command names, and the header's kubectl commands."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tfyard.cli import main
from tfyard.distribute.cluster import parse_tf_config
from tfyard.pack.k8s_spec import job_name

SCALE_PAGE = Path(__file__).resolve().parents[2] / "docs" / "scale.md"
PRINT_TF_CONFIG = "import os; print(os.environ['TF_CONFIG'])"


def _pack(code_dir, k8s: str, *extra) -> tuple[list[str], dict]:
    """(the header's lines without '# ', the manifest) of tfyard-k8s.yaml."""
    assert main(["pack", "--code_path", str(code_dir), "--main", "train.py", "--image",
                 "team/resnet_50:v1", "--k8s", k8s, "--train_params", "--steps 1",
                 *extra]) == 0
    lines = (code_dir.parent / "tfyard-k8s.yaml").read_text().splitlines()
    header = [line[2:] for line in lines if line.startswith("# ")]
    body = [line for line in lines if not line.startswith("#")]
    assert lines[:len(header)] == [f"# {line}" for line in header]  # the header comes first
    return header, json.loads("\n".join(body))


def _manifest(code_dir, k8s: str, *extra) -> dict:
    return _pack(code_dir, k8s, *extra)[1]


def _command(header: list[str], title: str) -> list[str]:
    """The header's command after `title:`."""
    (line,) = [line for line in header if line.startswith(f"{title}:")]
    return shlex.split(line.partition(":")[2])


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
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == len(roles)
    assert pod["spec"]["subdomain"] == name
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "team/resnet_50:v1"
    assert container["command"][3:] == ["python", "/data/train.py", "--data_dir", "/data/data",
                                        "--output_dir", "/data/output", "--steps", "1"]
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
    """So are the survivors of a lost member (exit 75): the lost member's own pod counts."""
    from tfyard.errors import LOST_PEER_EXIT_CODE, PREEMPTED_EXIT_CODE

    _, job = _manifest(code_dir, "2")["items"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"  # podFailurePolicy requires it
    assert pod["terminationGracePeriodSeconds"] >= 30
    (container,) = pod["containers"]
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["podFailurePolicy"]["rules"] == [
        {"action": "Ignore", "onExitCodes": {"containerName": container["name"],
                                             "operator": "In",
                                             "values": [LOST_PEER_EXIT_CODE,
                                                        PREEMPTED_EXIT_CODE]}},
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget",
                                                  "status": "True"}]},
    ]
    assert (LOST_PEER_EXIT_CODE, PREEMPTED_EXIT_CODE) == (75, 143)


@pytest.mark.parametrize(("data", "output"), [
    ("pvc:imagenet-train", "pvc:runs.team-a"),
    ("host:/mnt/datasets/imagenet", "host:/mnt/nfs/runs"),
])
def test_volumes_are_mounted_where_the_command_points(code_dir, data, output):
    header, manifest = _pack(code_dir, "2,1", "--data_volume", data, "--output-volume", output)
    pod = manifest["items"][1]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["command"][3:]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert volumes.keys() == mounts.keys() == {"data", "output"}
    for name, dir_flag, given, read_only in (("data", "--data_dir", data, True),
                                             ("output", "--output_dir", output, False)):
        mount, volume = mounts[name], volumes[name]
        assert mount["mountPath"] == argv[argv.index(dir_flag) + 1]
        assert mount["readOnly"] is read_only
        kind, source = given.split(":", 1)
        if kind == "pvc":
            assert volume["persistentVolumeClaim"] == {"claimName": source}
        else:
            assert volume["hostPath"]["path"] == source
        assert f"{given} at {mount['mountPath']}" in " ".join(header)
    assert not any(line.startswith("No ") for line in header)


def test_without_volumes_the_header_names_the_flags_to_add(code_dir):
    header, manifest = _pack(code_dir, "2")
    pod = manifest["items"][1]["spec"]["template"]["spec"]
    assert "volumes" not in pod and "volumeMounts" not in pod["containers"][0]
    missing = [line for line in header if line.startswith("No ")]
    assert len(missing) == 2
    assert "--data_volume pvc:CLAIM or host:/PATH" in missing[0] and "/data/data" in missing[0]
    assert "--output_volume pvc:CLAIM or host:/PATH" in missing[1]
    assert "/data/output" in missing[1]


def test_a_run_in_a_bucket_needs_no_output_volume_and_takes_credentials_from_a_secret(
        code_dir, capsys):
    header, manifest = _pack(code_dir, "2,1", "--data_volume", "pvc:imagenet", "--output_dir",
                             "s3://team-runs/rn50/a/", "--credentials_secret", "s3-creds")
    pod = manifest["items"][1]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["command"][3:]
    assert argv[argv.index("--output_dir") + 1] == "s3://team-runs/rn50/a"
    assert [volume["name"] for volume in pod["volumes"]] == ["data"]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert not any(line.startswith("No ") for line in header)
    assert any(line.startswith("Output: s3://team-runs/rn50/a,") for line in header)
    assert any("Secret s3-creds" in line for line in header)
    capsys.readouterr()
    pack = ["pack", "--code_path", str(code_dir), "--main", "train.py", "--image", "t/r:1"]
    for extra, said in (
            (["--k8s", "2", "--output_dir", "runs/a"], "a pod's own disk does not outlive it"),
            (["--k8s", "2", "--output_dir", "s3://b-1/a", "--output_volume", "pvc:runs"],
             "give one"),
            (["--k8s", "2", "--credentials_secret", "Not_A_Name"], "is not a Secret's name"),
            (["--output_dir", "s3://b-1/a"], "add --k8s WORKERS[,PS]")):
        assert main([*pack, *extra]) == 2
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1, err


def test_the_pods_get_the_tracking_settings_but_never_a_password(code_dir, capsys,
                                                                  monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.ml-team:5000")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "rn50")
    header, manifest = _pack(code_dir, "2,1", "--credentials_secret", "mlflow-creds")
    (container,) = manifest["items"][1]["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow.ml-team:5000"
    assert env["MLFLOW_EXPERIMENT_NAME"] == "rn50"
    assert any(line.startswith("Tracking: MLFLOW_TRACKING_URI=http://mlflow.ml-team:5000")
               for line in header)
    capsys.readouterr()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://me:hunter2@mlflow.ml-team")
    assert main(["pack", "--code_path", str(code_dir), "--main", "train.py", "--image",
                 "t/r:1", "--k8s", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "hunter2" not in err and "in the Secret" in err, err


def test_name_namespace_resources_and_the_kubectl_commands(code_dir):
    header, manifest = _pack(code_dir, "3,1", "--name", "rn50-a", "--namespace", "ml-team",
                             "--cpus", "7.5", "--memory", "30Gi", "--gpu")
    service, job = manifest["items"]
    pod = job["spec"]["template"]
    for item in (service, job):
        assert item["metadata"]["name"] == "rn50-a"
        assert item["metadata"]["namespace"] == "ml-team"
    assert pod["spec"]["subdomain"] == "rn50-a"
    env = {e["name"]: json.loads(e["value"]) for e in pod["spec"]["containers"][0]["env"]}
    assert env["TFYARD_CLUSTER"]["chief"] == ["rn50-a-0.rn50-a:2222"]
    assert pod["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "7.5", "memory": "30Gi"}, "limits": {"nvidia.com/gpu": 1}}
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "resnet-50"  # the image's
    assert _command(header, "Start") == ["kubectl", "apply", "-f", "tfyard-k8s.yaml"]
    assert _command(header, "Watch the job") == ["kubectl", "get", "job", "rn50-a", "-n",
                                                 "ml-team", "-w"]
    logs = _command(header, "Follow logs")
    assert logs[:4] == ["kubectl", "logs", "-n", "ml-team"] and "-f" in logs
    selected = dict(pair.split("=") for pair in logs[logs.index("-l") + 1].split(","))
    assert selected == service["spec"]["selector"]  # the Service's pods, this job's only
    assert selected.items() <= pod["metadata"]["labels"].items()
    assert selected["app.kubernetes.io/instance"] == "rn50-a"
    assert int(logs[logs.index("--max-log-requests") + 1]) == job["spec"]["completions"] == 5
    assert "--tail=-1" in logs  # every line, not kubectl's last 10 per pod
    watch = _command(header, "Watch the pods")
    assert watch[watch.index("-l") + 1] == logs[logs.index("-l") + 1]


def test_the_docs_commands_are_the_ones_pack_writes(code_dir):
    """The docs' Kubernetes example: its pack line runs, and its kubectl lines are the
    header's."""
    section = SCALE_PAGE.read_text().split("## Kubernetes\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    lines = [shlex.split(line, comments=True) for line in block.splitlines()]
    pack, *kubectl = [line for line in lines if line]   # the block's first line: a comment
    assert pack[:2] == ["tfyard", "pack"]
    argv = [arg for arg in pack[1:] if arg not in ("--build", "--push")]
    argv[argv.index("--code_path") + 1] = str(code_dir)
    assert main(argv) == 0
    header = (code_dir.parent / "tfyard-k8s.yaml").read_text().splitlines()
    written = [shlex.split(line.partition(":")[2]) for line in header
               if line.startswith("# ") and "kubectl" in line]
    assert kubectl == written


def test_a_queued_job_waits_suspended_for_kueue(code_dir, capsys):
    header, manifest = _pack(code_dir, "2,1", "--queue", "team-a.gpu", "--priority_class",
                             "high", "--namespace", "ml")
    service, job = manifest["items"]
    assert job["spec"]["suspend"] is True
    kueue = {key: value for key, value in job["metadata"]["labels"].items()
             if key.startswith("kueue.x-k8s.io/")}
    assert kueue == {"kueue.x-k8s.io/queue-name": "team-a.gpu",
                     "kueue.x-k8s.io/priority-class": "high"}
    for labels in (service["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert not any(key.startswith("kueue.x-k8s.io/") for key in labels)  # the Job's only
    (start,) = [line for line in header if line.startswith("Start:")]
    command, _, comment = start.partition(":")[2].partition("#")
    assert shlex.split(command) == ["kubectl", "apply", "-f", "tfyard-k8s.yaml"]
    assert "waits in team-a.gpu until Kueue admits it" in comment
    assert any(line.startswith("Queue: Kueue's LocalQueue team-a.gpu, priority high")
               for line in header)
    plain_header, plain = _pack(code_dir, "2,1")   # without --queue: runs at once, as before
    assert "suspend" not in plain["items"][1]["spec"]
    assert not any("Kueue" in line for line in plain_header)
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["pack", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "--queue NAME" in said and "kueue.x-k8s.io/queue-name=NAME" in said
    assert "created suspended" in said and "--priority_class NAME" in said
