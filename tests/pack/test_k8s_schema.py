"""Every manifest variant `pack --k8s` writes, validated strictly (no unknown field, every
required one) against the official schemas of each supported Kubernetes version, which
`kubernetes-validate` bundles: offline, no cluster."""

from __future__ import annotations

import json

import kubernetes_validate
import pytest

from tfyard.pack import make_spec
from tfyard.pack.k8s import render_manifest

# The oldest version the managed clouds still run, every other one since, and the newest known.
VERSIONS = ["1.29", "1.31", "1.33", "1.35", kubernetes_validate.latest_version()]

VARIANTS = {
    "workers": {"k8s": "3"},
    "ps": {"k8s": "2,1"},
    "gpu": {"k8s": "2", "gpu": True},
    "gpu_ps_claims": {"k8s": "4,2", "gpu": True, "name": "rn50", "namespace": "ml",
                      "cpus": "500m", "memory": "8Gi", "data_volume": "pvc:imagenet",
                      "output_volume": "pvc:runs"},
    "host_paths": {"k8s": "1", "cpus": "2", "data_volume": "host:/mnt/data",
                   "output_volume": "host:/mnt/nfs/runs"},
    "bucket": {"k8s": "2,1", "data_volume": "pvc:imagenet", "output_dir": "s3://runs/rn50",
               "credentials_secret": "s3-creds"},
    "kueue": {"k8s": "2,1", "namespace": "ml", "queue": "team-a.gpu",
              "priority_class": "high-priority"},
}


def _items(code_dir, **options) -> list[dict]:
    spec = make_spec(str(code_dir), "train.py", "team/trainer:1",
                     base_image="tensorflow/tensorflow:2.21.0",
                     train_params="--batch_size 64", **options)
    text = render_manifest(spec)
    manifest = json.loads("\n".join(line for line in text.splitlines()
                                    if not line.startswith("#")))
    assert (manifest["apiVersion"], manifest["kind"]) == ("v1", "List")  # kubectl's own
    return manifest["items"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_validates_strictly(code_dir, variant, version):
    items = _items(code_dir, **VARIANTS[variant])
    assert [item["kind"] for item in items] == ["Service", "Job"]
    for item in items:
        kubernetes_validate.validate(item, version, strict=True)


def test_the_check_catches_what_older_clusters_refuse(code_dir):
    """A pod-condition pattern without `status` passes on 1.35 and fails on 1.29 to 1.34."""
    job = _items(code_dir, k8s="2")[1]
    (pattern,) = job["spec"]["podFailurePolicy"]["rules"][1]["onPodConditions"]
    del pattern["status"]
    kubernetes_validate.validate(job, "1.35", strict=True)
    with pytest.raises(kubernetes_validate.ValidationError, match="'status' is a required"):
        kubernetes_validate.validate(job, "1.29", strict=True)
    job["spec"]["template"]["spec"]["mounts"] = []  # strict: an unknown field fails too
    with pytest.raises(kubernetes_validate.ValidationError, match="mounts"):
        kubernetes_validate.validate(job, "1.35", strict=True)


def test_a_queued_job_is_suspended_and_labelled_on_every_version(code_dir):
    """The one field a queued Job adds to the spec, `suspend`, is in every supported schema,
    and the check would see it misspelled."""
    job = _items(code_dir, k8s="2", queue="team-a")[1]
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    job["spec"]["suspended"] = job["spec"].pop("suspend")
    with pytest.raises(kubernetes_validate.ValidationError, match="suspended"):
        kubernetes_validate.validate(job, "1.29", strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_tuning_pages_indexed_job_validates_strictly(version):
    """docs/tuning.md's Kubernetes form of a shared study: one YAML block, an Indexed Job."""
    import re
    from pathlib import Path

    import yaml

    page = (Path(__file__).resolve().parents[2] / "docs" / "tuning.md").read_text()
    (block,) = re.findall(r"```yaml\n(.*?)```", page, flags=re.S)
    job = yaml.safe_load(block)
    assert (job["kind"], job["spec"]["completionMode"]) == ("Job", "Indexed")
    assert "$(JOB_COMPLETION_INDEX)" in " ".join(job["spec"]["template"]["spec"]
                                                 ["containers"][0]["args"])
    kubernetes_validate.validate(job, version, strict=True)
