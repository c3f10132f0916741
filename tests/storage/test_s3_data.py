"""Data in an S3 bucket, on a real S3-protocol server: every format reads as it reads from
disk, through a local copy that is kept equal to the prefix; train, evaluate and inspect
take `s3://`; each fault a user can fix is one line naming it, never the credentials."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import python_prints
from tests.data.helpers import collect
from tests.storage.conftest import (
    free_port,
    moto_server,
    refused,
    refuses_bad_data_urls,
    train_on,
    two_files,
    upload,
)
from tests.train.test_evaluate_splits import WRITERS
from tfyard.cli import main
from tfyard.data import build_dataset
from tfyard.errors import UserError
from tfyard.predict.inputs import check as check_inputs
from tfyard.replace import check_writable
from tfyard.storage import readable_dir, readable_path


def test_a_prefix_is_copied_once_then_kept_equal_to_the_bucket(s3, tmp_path):
    upload(s3, two_files(tmp_path / "source"), "copies", "set")
    work = tmp_path / "work"
    local = readable_dir("s3://copies/set", str(work))
    assert sorted(str(p.relative_to(local)) for p in work.rglob("*") if p.is_file()) == [
        "a.bin", os.path.join("nested", "b.bin")]
    assert open(os.path.join(local, "a.bin"), "rb").read() == b"a" * 1000
    inode = os.stat(os.path.join(local, "a.bin")).st_ino
    assert readable_dir("s3://copies/set/", str(work)) == local   # unchanged: not copied again
    assert os.stat(os.path.join(local, "a.bin")).st_ino == inode

    s3.put_object(Bucket="copies", Key="set/a.bin", Body=b"new")
    s3.delete_object(Bucket="copies", Key="set/nested/b.bin")
    live, dead = (os.path.join(local, f".a.bin.tmp-{n}") for n in ("0a1b2c3d", "dead"))
    open(dead, "w").close()   # a killed copy's
    with open(live, "w") as held:   # a copy beside this one, writing now
        fcntl.flock(held, fcntl.LOCK_EX)
        readable_dir("s3://copies/set", str(work))
    assert os.path.exists(live) and not os.path.exists(dead)
    assert open(os.path.join(local, "a.bin"), "rb").read() == b"new"
    assert not os.path.exists(os.path.join(local, "nested", "b.bin"))


def test_a_file_a_checkpoint_prefix_or_a_folder_is_copied_alone(s3, tmp_path):
    source = tmp_path / "source"
    (source / "run" / "checkpoints").mkdir(parents=True)
    names = ["ckpt-4.index", "ckpt-4.data-00000-of-00001", "ckpt-40.index", "w.h5"]
    for name in names:
        (source / "run" / "checkpoints" / name).write_text(name)
    (source / "run" / "run.json").write_text("{}")
    upload(s3, source, "weights", "runs")
    work = str(tmp_path / "work")
    prefix = readable_path("s3://weights/runs/run/checkpoints/ckpt-4", work, "--init")
    folder = os.path.dirname(prefix)
    assert sorted(os.listdir(folder)) == ["ckpt-4.data-00000-of-00001", "ckpt-4.index"]
    assert open(readable_path("s3://weights/runs/run/checkpoints/w.h5", work, "--init")
                ).read() == "w.h5"
    run = readable_path("s3://weights/runs/run", work, "--init")
    assert sorted(os.listdir(os.path.join(run, "checkpoints"))) == sorted(names)
    with pytest.raises(UserError, match="^--init s3://weights/runs/nothing: no such object"):
        readable_path("s3://weights/runs/nothing", work, "--init")


@pytest.mark.parametrize("name", sorted(set(WRITERS) - {"digits"}))
def test_every_format_reads_from_a_bucket_as_from_disk(s3, tmp_path, name):
    data = tmp_path / "data"
    data.mkdir()
    WRITERS[name](data)
    upload(s3, data, "formats", name)
    for split in ("train", "validation"):
        here, there = (collect(build_dataset(name, split, place, batch_size=4, image_size=16,
                                             evaluation=True, cache_dir=str(tmp_path / "work")))
                       for place in (str(data), f"s3://formats/{name}"))
        assert np.array_equal(here[0], there[0]) and np.array_equal(here[1], there[1])


def test_train_evaluate_and_inspect_take_a_bucket(s3, tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    WRITERS["cifar10"](data)
    upload(s3, data, "runs-data", "cifar")
    out = tmp_path / "out"
    assert main(["train", "--dataset", "cifar10", "--data_dir", "s3://runs-data/cifar",
                 "--model", "cifar_resnet8", "--image_size", "16", "--batch_size", "4",
                 "--train_steps", "3", "--steps_per_loop", "3", "--num_gpus", "0", "--quiet",
                 "--no_jit_compile", "--no_export", "--skip_corrupt", "--output_dir",
                 str(out)]) == 0
    run = json.loads((out / "run.json").read_text())
    assert run["data_dir"] == "s3://runs-data/cifar"
    assert json.loads((out / "summary.json").read_text())["skipped_records"] == 0
    upload(s3, out / "checkpoints", "runs-data", "first/checkpoints")
    tuned = tmp_path / "tuned"
    assert main(["train", "--dataset", "cifar10", "--data_dir", "s3://runs-data/cifar",
                 "--model", "cifar_resnet8", "--image_size", "16", "--batch_size", "4",
                 "--train_steps", "1", "--num_gpus", "0", "--quiet", "--no_jit_compile",
                 "--no_export", "--output_dir", str(tuned), "--init_checkpoint",
                 "s3://runs-data/first/checkpoints/ckpt-3"]) == 0
    init = json.loads((tuned / "run.json").read_text())["init"]
    assert init["source"] == "s3://runs-data/first/checkpoints/ckpt-3" and init["loaded"] > 0
    capsys.readouterr()
    assert main(["evaluate", "--output_dir", str(out)]) == 0   # the run's s3:// data again
    assert "top1" in capsys.readouterr().out
    assert main(["data", "inspect", "s3://runs-data/cifar", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["path"] == "s3://runs-data/cifar" and report["format"] == "cifar10"
    assert report["splits"]["train"]["records"] == 10

    convert = ["data", "convert", "cifar10", "s3://runs-data/cifar", "s3://runs-data/set",
               "--shards", "2", "--workers", "1"]
    assert main(convert) == 0   # from a bucket into a bucket
    assert capsys.readouterr().out.startswith("train: 10 records, validation: ")
    assert main(["data", "inspect", "s3://runs-data/set", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "imagenet" and report["splits"]["train"]["records"] == 10
    assert "already holds a converted set" in refused(convert, capsys)
    s3.put_object(Bucket="runs-data", Key="set/train-00009-of-00010", Body=b"stale")
    assert main([*convert, "--overwrite"]) == 0   # the set replaced whole, the stale shard gone
    assert "set/train-00009-of-00010" not in [
        item["Key"] for item in s3.list_objects_v2(Bucket="runs-data", Prefix="set/")["Contents"]]


def test_each_fault_is_one_line_before_any_step(s3, s3_endpoint, tmp_path, capsys,
                                                monkeypatch):
    upload(s3, tmp_path, "faults", "nothing")   # the bucket, holding no data
    out = str(tmp_path / "out")

    def train(url):
        return train_on(url, out)

    refuses_bad_data_urls("s3", "Not_A_Bucket", out, capsys)
    s3.put_object(Bucket="faults", Key="escape/../../outside", Body=b"x")
    assert "would land outside the copy" in refused(train("s3://faults/escape"), capsys)
    assert "unknown scheme ftp://" in refused(train("ftp://host/data"), capsys)
    run = ["train", "--dataset", "digits", "--num_gpus", "0", "--output_dir"]
    assert "no such bucket" in refused([*run, "s3://no-bucket-here/run"], capsys)
    assert "the work dir is local scratch space" in refused(
        [*run, "s3://faults/run", "--work_dir", "s3://faults/work"], capsys)
    assert "must be inside --output_dir s3://faults/run" in refused(
        [*run, "s3://faults/run", "--log_dir", "s3://faults/logs"], capsys)
    assert "cannot be written to a bucket; give a local path" in refused(
        [*run, out, "--log_dir", "s3://faults/logs"], capsys)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"chief": ["127.0.0.1:1"]},
                                                "task": {"type": "evaluator", "index": 0}}))
    assert "an evaluator member cannot follow a run in a bucket yet" in refused(
        [*run, "s3://faults/run"], capsys)
    monkeypatch.delenv("TF_CONFIG")
    for command in (["evaluate"], ["plot"], ["predict", str(tmp_path)]):
        assert "--output_dir s3://faults/run: no files under this prefix" in refused(
            [command[0], "--output_dir", "s3://faults/run", *command[1:]], capsys)
    with pytest.raises(UserError, match=r"^s3://faults/images holds no images \(.bmp/"):
        check_inputs(["s3://faults/images"])
    with pytest.raises(UserError, match="^--output s3://faults/rows.csv: tfyard cannot write "
                       "into a bucket"):
        check_writable("s3://faults/rows.csv", "--output")

    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    assert "cannot reach the S3 endpoint" in refused(train("s3://faults/cifar"), capsys)
    assert time.monotonic() - started < 30
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3_endpoint)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    assert "no AWS credentials found" in refused(train("s3://faults/cifar"), capsys)
    assert not os.path.exists(out)


def test_access_denied_is_one_line_for_data_and_for_a_run(s3, tmp_path, capsys, monkeypatch):
    """A store that checks permissions (moto's IAM, after the set-up's first requests): a
    user without any is refused reading data and writing a run, each in one line."""
    import boto3

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="4") as endpoint:
        admin = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        boto3.client("s3", **admin).create_bucket(Bucket="locked")
        boto3.client("s3", **admin).put_object(Bucket="locked", Key="cifar/data_batch_1.bin",
                                               Body=b"x")
        boto3.client("iam", **admin).create_user(UserName="nobody")
        key = boto3.client("iam", **admin).create_access_key(UserName="nobody")["AccessKey"]
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"])
        train = ["train", "--dataset", "cifar10", "--num_gpus", "0"]
        assert refused([*train, "--data_dir", "s3://locked/cifar", "--output_dir",
                         str(tmp_path / "out")], capsys).endswith(
            "s3://locked/cifar: access denied; give these credentials read (and for outputs, "
            "write) access")
        err = refused([*train, "--output_dir", "s3://locked/runs/a"], capsys)
        assert "s3://locked/runs/a" in err and "access denied" in err
        assert key["SecretAccessKey"] not in err


def test_buckets_need_the_cloud_extra_and_tfyard_alone_imports_none_of_it(tmp_path):
    assert python_prints("import sys, tfyard.cli, tfyard.data, tfyard.storage; "
                         "print('boto3' in sys.modules or 'google.cloud' in sys.modules)") \
        == "False"
    for scheme, library in (("s3", "boto3"), ("gs", "google.cloud")):
        code = (f"import sys; sys.modules['{library}'] = None; from tfyard.cli import main; "
                f"sys.exit(main(['data', 'inspect', '{scheme}://some-bucket/data']))")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.strip() == (f"tfyard: error: {scheme}:// paths need the cloud "
                                       "extra: pip install 'tfyard[cloud]'")
    with pytest.raises(UserError, match="unknown scheme"):
        readable_dir("s4://x/y", None)
