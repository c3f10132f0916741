"""Store failures said in seconds, and outputs refused before any work, on real servers (moto's
S3 server, with its IAM checks where credentials matter, and gcp-storage-emulator), behind the
test proxy where the network fails: a silent endpoint is one line within the request timeout
(or TFYARD_STORE_TIMEOUT), naming the endpoint variable the user set; a wrong secret is refused
credentials wherever it is met; a bucket deleted mid-run stops the run at once; a bucket root
or an output the store will not take is refused before scoring or converting. Also: evaluate
names the bucket's URL, and a run's local copy lives at `bucket-runs/SCHEME/BUCKET/PREFIX`,
a copy at the place older versions used moved there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.storage.conftest import free_port, gcs_upload, moto_server, refused, upload
from tests.storage.proxy import StoreProxy
from tests.storage.test_s3_runs import bucket, bucket_step, finish, objects, start, work_dir
from tests.train.conftest import FAST, read_json
from tfyard.cli import main

RUN = ["train", "--dataset", "digits", "--num_gpus", "0", "--train_steps", "1"]


def one_line(argv: list[str], env: dict, timeout: float) -> tuple[str, float]:
    """`tfyard ARGV` in a process of its own, refused in one line: the line, and seconds."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "tfyard", *argv], capture_output=True,
                          text=True, env=env, timeout=timeout)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.count("\n") == 1, done.stderr[-3000:]
    return done.stderr.strip(), time.monotonic() - started


def test_a_silent_s3_endpoint_is_one_line_in_seconds_naming_the_variable_set(
        s3, s3_endpoint, tmp_path, capsys, monkeypatch):
    bucket(s3, "quiet")
    proxy = StoreProxy(s3_endpoint)
    proxy.hold()   # accepts every connection and never answers
    env = {name: value for name, value in os.environ.items() if name != "AWS_ENDPOINT_URL_S3"}
    env["AWS_ENDPOINT_URL"] = proxy.url
    argv = [*RUN, "--output_dir", "s3://quiet/run", "--work_dir", str(tmp_path / "work")]
    try:
        for setting, wait in ((("TFYARD_STORE_REQUEST_TIMEOUT", "2"), "2s"),
                              (("TFYARD_STORE_TIMEOUT", "9"), "3s")):
            line, took = one_line(argv, {**env, setting[0]: setting[1]}, timeout=60)
            # the first request names its object: the check for a study's tune.json
            assert line == (f"tfyard: error: --output_dir s3://quiet/run/tune.json: cannot "
                            f"reach the S3 "
                            f"endpoint {proxy.url}: no answer within {wait}, 3 tries; check "
                            "AWS_ENDPOINT_URL and the network (TFYARD_STORE_REQUEST_TIMEOUT "
                            "sets the wait)")
            assert took < 40, took
    finally:
        proxy.close()
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")   # refused
    assert refused(["data", "inspect", "s3://quiet/x"], capsys).endswith(
        "(EndpointConnectionError); check AWS_ENDPOINT_URL and the network")
    monkeypatch.setenv("TFYARD_STORE_REQUEST_TIMEOUT", "soon")
    assert refused(["data", "inspect", "s3://quiet/x"], capsys) == (
        "tfyard: error: TFYARD_STORE_REQUEST_TIMEOUT='soon' is not a number; set it to a number "
        "such as 15 or unset it")
    monkeypatch.setenv("TFYARD_STORE_REQUEST_TIMEOUT", "0")
    assert refused(["data", "inspect", "s3://quiet/x"], capsys) == (
        "tfyard: error: TFYARD_STORE_REQUEST_TIMEOUT=0 is not a positive number of seconds; set "
        "it to one such as 15 or unset it")


def test_a_silent_gcs_endpoint_is_one_line_in_seconds(gcs, gcs_endpoint, tmp_path):
    gcs_upload(gcs, tmp_path, "quiet", "nothing")
    proxy = StoreProxy(gcs_endpoint)
    proxy.hold()
    env = {**os.environ, "STORAGE_EMULATOR_HOST": proxy.url,
           "TFYARD_STORE_REQUEST_TIMEOUT": "2"}
    try:
        line, took = one_line(["data", "inspect", "gs://quiet/x"], env, timeout=50)
    finally:
        proxy.close()
    assert line == (f"tfyard: error: PATH gs://quiet/x: cannot reach the GCS endpoint "
                    f"{proxy.url} within 2s, 3 tries; check STORAGE_EMULATOR_HOST and the "
                    "network (TFYARD_STORE_REQUEST_TIMEOUT sets the wait)")
    assert took < 40, took


def test_credentials_and_permissions_are_named_before_any_work(
        s3, tmp_path, run, folder, capsys, monkeypatch):
    """moto's IAM checks (after the set-up's requests): a wrong secret is refused credentials
    for a run's output too (whose first request, a HEAD, gets a bare 403); a user who may only
    read is refused predict's and convert's outputs before scoring or converting."""
    import boto3

    with moto_server(INITIAL_NO_AUTH_ACTION_COUNT="7") as endpoint:
        admin = {"endpoint_url": endpoint, "region_name": "us-east-1"}
        boto3.client("s3", **admin).create_bucket(Bucket="locked")
        iam = boto3.client("iam", **admin)
        keys = {}
        for user in ("nobody", "reader"):
            iam.create_user(UserName=user)
            keys[user] = iam.create_access_key(UserName=user)["AccessKey"]
        policy = iam.create_policy(PolicyName="read", PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetObject"],
                "Resource": ["arn:aws:s3:::locked", "arn:aws:s3:::locked/*"]}]}))
        iam.attach_user_policy(UserName="reader", PolicyArn=policy["Policy"]["Arn"])
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["nobody"]["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
        image = str(folder / "validation" / "red" / "0.jpg")
        wrong = "the store refused the AWS credentials (SignatureDoesNotMatch)"
        for argv in ([*RUN, "--output_dir", "s3://locked/runs/a"],
                     ["predict", "--output_dir", str(run), image, "--output",
                      "s3://locked/scored/rows.csv"]):
            err = refused(argv, capsys)
            assert wrong in err and "kept in" not in err, err

        monkeypatch.setenv("AWS_ACCESS_KEY_ID", keys["reader"]["AccessKeyId"])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", keys["reader"]["SecretAccessKey"])
        denied = "access denied; give these credentials read (and for outputs, write) access"
        for argv, url in ((["predict", "--output_dir", str(run), image, "--output",
                            "s3://locked/scored/rows.csv"], "s3://locked/scored/rows.csv"),
                          (["data", "convert", "imagefolder", str(folder), "s3://locked/set",
                            "--workers", "1"], "s3://locked/set")):
            assert refused(argv, capsys).endswith(f"{url}: {denied}")   # not "kept in ..."


def test_a_bucket_root_or_a_missing_bucket_is_refused_as_an_output(
        s3, gcs, tmp_path, run, folder, capsys):
    bucket(s3, "roots")
    image = str(folder / "validation" / "red" / "0.jpg")
    for argv, flag, url, part in (
            (["predict", "--output_dir", str(run), image, "--output", "s3://roots"],
             "--output", "s3://roots", "KEY"),
            (["data", "convert", "imagefolder", str(folder), "s3://roots/", "--workers", "1"],
             "destination", "s3://roots/", "KEY"),
            ([*RUN, "--output_dir", "gs://roots"], "--output_dir", "gs://roots", "PREFIX"),
            ([*RUN, "--output_dir", "s3://roots"], "--output_dir", "s3://roots", "PREFIX")):
        scheme = url.split(":")[0]
        assert refused(argv, capsys) == (
            f"tfyard: error: {flag} {url} is a bucket's root, where the output would mix with "
            f"all the bucket holds; give a prefix: {scheme}://roots/{part}")
    assert objects(s3, "roots", "") == {}
    err = refused(["predict", "--output_dir", str(run), image, "--output",
                   "s3://no-bucket-here/rows.csv"], capsys)
    assert err == ("tfyard: error: --output s3://no-bucket-here/rows.csv: no such bucket; check "
                   "the bucket name")   # before scoring: no output to keep


def test_evaluate_names_the_bucket_it_read(s3, run, capsys):
    upload(s3, run, "evals", "runs/a")
    capsys.readouterr()
    assert main(["evaluate", "--output_dir", "s3://evals/runs/a"]) == 0
    assert json.loads(capsys.readouterr().out)["source"] == "s3://evals/runs/a/checkpoints/ckpt-6"


@pytest.mark.slow
def test_a_bucket_deleted_mid_run_stops_it_at_once(s3, tmp_path, digits_work):
    name = bucket(s3, "gone")
    url = "s3://gone/run"
    work = work_dir(tmp_path, digits_work)
    proc = start(url, work, {"TFYARD_STORE_TIMEOUT": "600"}, "--no_export", "--train_steps",
                 "100000")
    try:
        deadline = time.monotonic() + 300
        while bucket_step(s3, name, "run") < 5:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)
        while True:   # the publisher may put objects back between the deletes
            for key in objects(s3, name, "run"):
                s3.delete_object(Bucket=name, Key=f"run/{key}")
            try:
                s3.delete_bucket(Bucket=name)
                break
            except s3.exceptions.ClientError:
                continue
        deleted = time.monotonic()
        code, out = finish(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 2, out[-3000:]
    assert time.monotonic() - deleted < 60
    copy = work / "bucket-runs" / "s3" / name / "run"
    assert out.strip().splitlines()[-1] == (
        f"tfyard: error: --output_dir {url}: no such bucket; check the bucket name; the run's "
        f"latest files are kept in {copy}: rerun the same command on this machine to upload "
        "them and resume")


def test_the_local_copy_is_under_bucket_runs_and_an_older_one_is_moved_there(
        s3, tmp_path, digits_work):
    """Without --work_dir the copy is `CACHE/bucket-runs/SCHEME/BUCKET/PREFIX`. Before, it was
    inside the default work dir (`CACHE/work/s3/B/P/bucket-runs/s3/B/P`); a copy left there
    by a stopped run, holding a checkpoint the bucket lacks, is moved and uploaded."""
    name = bucket(s3, "moves")
    url = f"s3://{name}/team/run"
    cache = tmp_path / "cache" / "tfyard"
    default_work = cache / "work" / "s3" / name / "team" / "run"
    default_work.mkdir(parents=True)
    for entry in ("digits", "tfrecord_counts.json"):
        os.symlink(digits_work / entry, default_work / entry)
    argv = ["train", *FAST, "--train_steps", "6", "--checkpoint_every_steps", "3",
            "--no_export", "--output_dir", url]
    assert main(argv) == 0
    copy = cache / "bucket-runs" / "s3" / name / "team" / "run"
    assert read_json(copy / "run.json")["output_copy"] == str(copy)
    assert bucket_step(s3, name, "team/run") == 6

    old = default_work / "bucket-runs" / "s3" / name / "team" / "run"
    old.parent.mkdir(parents=True)
    shutil.move(copy, old)   # as an older tfyard left it, the bucket a checkpoint behind
    for key in objects(s3, name, "team/run"):
        if key.startswith("checkpoints/ckpt-6."):
            s3.delete_object(Bucket=name, Key=f"team/run/{key}")
    s3.put_object(Bucket=name, Key="team/run/checkpoints/checkpoint",
                  Body=b'model_checkpoint_path: "ckpt-3"\nall_model_checkpoint_paths: "ckpt-3"\n')
    assert main(argv) == 0
    assert not old.exists() and bucket_step(s3, name, "team/run") == 6
    assert json.loads(objects(s3, name, "team/run")["summary.json"])["final_step"] == 6
    assert Path(copy / "checkpoints" / "ckpt-6.index").exists()
