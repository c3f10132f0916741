"""Every run in MLflow, on a real tracking server (`mlflow server` on 127.0.0.1, SQLite),
read back through MLflow's own client: params, one value per step, files, the model that
predicts on JPEG bytes as `tfyard predict` does, and its registration; a SIGKILL and a
resume are one MLflow run; a server that goes away never pauses training; a bad URI stops
the run before step 1; `tfyard track` logs an untracked run, once, and `tfyard evaluate`
adds its figures to it. The clusters' chief
logging alone is tests/train/test_clusters.py."""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import urllib.request
from importlib.metadata import version

import numpy as np
import pytest

from tests.conftest import run_here
from tests.predict.conftest import COLOURS
from tests.storage.conftest import free_port
from tests.storage.proxy import StoreProxy
from tests.tracking.conftest import (
    model_server,
    runs,
    steps,
    tracked,
    wait_for,
)
from tests.train.conftest import FAST, read_json, read_jsonl
from tfyard import tracking
from tfyard.cli import main
from tfyard.quiet import log_filter

pytest.importorskip("mlflow")
SECRET = "s3cr3t-d0n7-pr1n7"


def report_steps(output_dir, kind: str = "train") -> list[int]:
    path = output_dir / "metrics.jsonl"
    return [r["step"] for r in read_jsonl(path) if r["kind"] == kind] if path.exists() else []


def digit_jpeg(index: int) -> bytes:
    from PIL import Image
    from sklearn.datasets import load_digits

    pixels = (load_digits().images[index] * 16).clip(0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).resize((32, 32)).save(out, format="JPEG")
    return out.getvalue()


def test_a_run_logs_params_steps_files_and_a_model_that_predicts_as_tfyard_does(
        mlflow_uri, experiment, tmp_path, digits_work, monkeypatch, capsys):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    out = tmp_path / "net-a"
    talking = [flag for flag in FAST if flag != "--quiet"]
    assert main(["train", *talking, "--output_dir", str(out), "--work_dir", str(digits_work),
                 "--train_steps", "10", "--mlflow_uri", mlflow_uri, "--register_model",
                 f"digits-{experiment}"]) == 0
    (logged,) = runs(mlflow_uri, experiment)
    said = "".join(capsys.readouterr())   # which run, at the start, with its page
    run_id, experiment_id = logged.info.run_id, logged.info.experiment_id
    assert said.count(f"tfyard: logging to MLflow run {run_id} in experiment '{experiment}': "
                      f"{mlflow_uri}/#/experiments/{experiment_id}/runs/{run_id}\n") == 1
    assert said.index(f"MLflow run {run_id}") < said.index("step 5/10")
    assert logged.info.status == "FINISHED" and logged.info.run_name == "net-a"
    assert read_json(out / "run.json")["mlflow_run_id"] == logged.info.run_id
    params = logged.data.params
    assert (params["model"], params["dataset"], params["strategy"]) == (
        "cifar_resnet8", "digits", "one_device")
    assert params["workers"] == "1" and params["ps"] == "0" and "tensorflow_version" in params
    assert int(params["train_examples"]) > 1000
    assert params["output_dir"] == str(out) and params["mlflow_uri"] == mlflow_uri
    assert steps(mlflow_uri, logged.info.run_id, "loss") == report_steps(out) == [5, 10]
    assert steps(mlflow_uri, logged.info.run_id, "eval_top1") == report_steps(out, "eval")
    client = MlflowClient(tracking_uri=mlflow_uri)
    files = {item.path for item in client.list_artifacts(logged.info.run_id)}
    assert {"run.json", "summary.json", "curves.png"} <= files

    import mlflow.pyfunc

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)   # where models:/ URIs are looked up
    (version,) = client.search_model_versions(f"name='digits-{experiment}'")
    assert version.run_id == logged.info.run_id
    model = mlflow.pyfunc.load_model(f"models:/digits-{experiment}/{version.version}")
    images = [digit_jpeg(3), digit_jpeg(7)]
    served = model.predict([*images])
    for index, image in enumerate(images):
        (tmp_path / f"{index}.jpg").write_bytes(image)
    import tfyard

    local = tfyard.predict(out, [str(tmp_path / f"{i}.jpg") for i in range(2)])
    assert list(served["class_name"]) == [row["class_name"] for row in local]
    assert [list(ids) for ids in served["top_ids"]] == [row["top_ids"] for row in local]
    assert np.allclose(np.stack(served["top_scores"]), [row["top_scores"] for row in local])


def test_sigkill_and_a_resume_are_one_mlflow_run_with_one_value_per_step(
        mlflow_uri, experiment, tmp_path, digits_work, monkeypatch):
    """The killed run is a fresh process (SIGKILL); the resume runs in this one."""
    out = tmp_path / "run"
    flags = ["train", *FAST, "--output_dir", str(out), "--work_dir", str(digits_work),
             "--no_export", "--train_steps", "60", "--checkpoint_every_steps", "10",
             "--eval_every_epochs", "1"]
    first = subprocess.Popen([sys.executable, "-m", "tfyard", *flags], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True,
                             env=tracked(mlflow_uri, experiment))
    wait_for(lambda: len(report_steps(out)) >= 5, first)   # past a checkpoint or two
    first.kill()
    first.wait()
    (killed,) = runs(mlflow_uri, experiment)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    assert main(flags) == 0
    (logged,) = runs(mlflow_uri, experiment)
    assert logged.info.run_id == killed.info.run_id and logged.info.status == "FINISHED"
    logged_steps = steps(mlflow_uri, logged.info.run_id, "loss")   # each value, sorted
    assert logged_steps == sorted(set(report_steps(out))) and logged_steps[-1] == 60
    assert steps(mlflow_uri, logged.info.run_id, "eval_top1") == sorted(
        set(report_steps(out, "eval")))


def test_a_server_that_goes_away_never_pauses_training_and_gets_the_metrics_later(
        mlflow_uri, experiment, tmp_path, digits_work, monkeypatch, capsys):
    """The server goes away and comes back as the run trains: unreachable through a loopback
    proxy that drops each request unanswered (`StoreProxy.stop`, a crash or a lost network),
    then passes them on again, once the run has trained on and said the failure (a request
    waits MLFLOW_HTTP_REQUEST_TIMEOUT, 3 s here: on a fast machine a run trains past an
    outage timed on its reports alone before a request has failed). The run trains in this
    process; a thread of its own switches the proxy."""
    out = tmp_path / "run"
    flags = ["train", *FAST, "--output_dir", str(out), "--work_dir", str(digits_work),
             "--no_export", "--train_steps", "100", "--eval_every_epochs", "100"]
    proxy = StoreProxy(mlflow_uri)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", proxy.url)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "3")
    paused, said = [], threading.Event()
    heard = logging.Handler()
    heard.emit = lambda record: said.set() if " failed" in record.getMessage() else None

    def outage():
        try:
            wait_for(lambda: len(report_steps(out)) >= 2)
            proxy.stop()
            reached = len(report_steps(out))         # the server is gone: training goes on
            wait_for(lambda: len(report_steps(out)) >= reached + 12, timeout=60)
            assert said.wait(60), "no failure said"  # (a run that ends first waits to flush)
        except AssertionError as error:
            paused.append(error)
        finally:
            proxy.release()                          # back, before the run ends

    switch = threading.Thread(target=outage, daemon=True)
    logging.getLogger("tfyard").addHandler(heard)
    try:
        switch.start()
        done = run_here(capsys, *flags)
        switch.join()
    finally:
        logging.getLogger("tfyard").removeHandler(heard)
        proxy.close()
    output = done.stdout + done.stderr
    assert done.returncode == 0 and not paused, (paused, output[-3000:])
    assert output.count(f"MLflow at {proxy.url} failed") == 1, output[-3000:]
    assert "not sent" not in output
    (logged,) = runs(mlflow_uri, experiment)
    logged_steps = steps(mlflow_uri, logged.info.run_id, "loss")
    assert logged_steps == report_steps(out) and logged_steps[-1] == 100


def test_a_bad_uri_stops_before_step_1_unless_tracking_is_optional(tmp_path, digits_work,
                                                                     capsys):
    uri = f"http://me:{SECRET}@127.0.0.1:{free_port()}"
    out = tmp_path / "run"
    flags = ["train", *FAST, "--output_dir", str(out), "--work_dir", str(digits_work),
             "--no_export", "--train_steps", "5", "--mlflow_uri", uri]
    assert main(flags) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and SECRET not in err, err
    assert err.startswith("tfyard: error: MLflow at http://me:***@127.0.0.1:") and \
        "cannot be used" in err and "--mlflow_optional" in err
    assert report_steps(out) == []
    assert main([*flags, "--mlflow_optional"]) == 0
    said = "".join(capsys.readouterr())
    assert said.count("training untracked (--mlflow_optional)") == 1 and SECRET not in said
    assert report_steps(out) == [5]
    assert SECRET not in (out / "run.json").read_text()


def test_track_logs_an_untracked_run_once_with_its_model(mlflow_uri, experiment, tmp_path,
                                                         run, monkeypatch,
                                                         capsys):
    """`track` and `evaluate` in this process: what they send is the point, not a fresh
    one (the CLI's own process is tests/test_readme.py's tracking page)."""
    from mlflow.tracking import MlflowClient

    copy = tmp_path / "old-run"
    shutil.copytree(run, copy)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    assert main(["track", "--output_dir", str(copy)]) == 0
    (logged,) = runs(mlflow_uri, experiment)
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        f"tracked {copy} as MLflow run {logged.info.run_id} at {mlflow_uri}")
    assert read_json(copy / "run.json")["mlflow_run_id"] == logged.info.run_id
    # the params a live run logs, each from run.json as it does (issue 67: these lacked)
    from tfyard.train.outside.tracked import params

    assert logged.data.params == params(read_json(copy / "run.json")), logged.data.params
    assert {key: logged.data.params.get(key) for key in (
        "strategy", "replicas", "workers", "ps", "gpus", "tfyard_version")} == {
        "strategy": "one_device", "replicas": "1", "workers": "1", "ps": "0", "gpus": "0",
        "tfyard_version": version("tfyard")}
    assert "tensorflow_version" in logged.data.params
    assert int(logged.data.params["train_examples"]) > 0
    assert steps(mlflow_uri, logged.info.run_id, "loss") == report_steps(copy)
    assert main(["track", "--output_dir", str(copy)]) == 0
    (same,) = runs(mlflow_uri, experiment)
    assert same.info.run_id == logged.info.run_id
    assert steps(mlflow_uri, logged.info.run_id, "loss") == report_steps(copy)
    assert same.info.status == "FINISHED"
    (model,) = MlflowClient(tracking_uri=mlflow_uri).search_logged_models(
        experiment_ids=[logged.info.experiment_id])   # logged once, by the first track
    assert model.source_run_id == logged.info.run_id
    assert main(["evaluate", "--output_dir", str(copy)]) == 0   # into the same run
    assert steps(mlflow_uri, logged.info.run_id, "evaluate_validation_top1") == [
        report_steps(copy)[-1]]
    assert runs(mlflow_uri, experiment)[0].info.status == "FINISHED"
    capsys.readouterr()
    assert main(["track", "--output_dir", str(tmp_path / "nowhere")]) == 2
    assert "holds no run.json" in capsys.readouterr().err


def post(url: str, body: dict) -> tuple[int, str]:
    request = urllib.request.Request(f"{url}/invocations", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return response.status, response.read().decode()


def test_the_served_model_takes_image_bytes_only_over_rest_and_in_process(
        mlflow_uri, experiment, tmp_path, run, folder, monkeypatch):
    import mlflow.pyfunc

    import tfyard
    from tfyard.predict.local import locate
    from tfyard.tracking.model import ARTIFACT, ImageClassifier
    from tfyard.train.outside.tracked import backfill

    copy, name = tmp_path / "served", f"served-{experiment}"
    shutil.copytree(run, copy)
    backfill(tracking.settings(mlflow_uri, experiment, register_model=name), str(copy),
             str(copy))
    files = [folder / "validation" / label / "0.jpg" for label in COLOURS]
    local = tfyard.predict(copy, [str(path) for path in files])
    jpegs = [base64.b64encode(path.read_bytes()).decode() for path in files]
    secret = tmp_path / "secret.jpg"      # an image on the serving host: never scored
    secret.write_bytes(files[0].read_bytes())
    paths = [str(secret), "/etc/hostname", "s3://bucket/cat.jpg", "gs://b/x.jpg",
             "hdfs://nn/x.jpg", "file:///etc/passwd"]
    with model_server(f"models:/{name}/1", {"MLFLOW_TRACKING_URI": mlflow_uri},
                      tmp_path / "serve.log") as url:
        status, text = post(url, {"inputs": jpegs})
        assert status == 200
        rows = json.loads(text)["predictions"]
        assert [row["class_name"] for row in rows] == [row["class_name"] for row in local]
        assert [row["top_ids"] for row in rows] == [row["top_ids"] for row in local]
        assert np.allclose([row["top_scores"] for row in rows],
                           [row["top_scores"] for row in local], atol=1e-6)
        status, text = post(url, {"inputs": [jpegs[0], *paths]})   # a mixed batch
        assert status == 200 and "NaN" not in text
        first, *refused = json.loads(text, parse_constant=pytest.fail)["predictions"]
        assert first["class_name"] == local[0]["class_name"]
        for row in refused:
            assert row["class_id"] is None and row["score"] is None and row["top_ids"] == []
            assert row["error"].startswith("a path or URL is never opened; send the image's "
                                           "bytes")
    said = (tmp_path / "serve.log").read_text()   # TensorFlow's C++ lines: none at the load
    assert not re.search(log_filter.LOG_PREFIX, said) and log_filter.ABSL_BANNER not in said, said
    assert "cuInit" not in said

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)   # where models:/ URIs are looked up
    served = mlflow.pyfunc.load_model(f"models:/{name}/1")
    assert served.metadata.get_input_schema().to_dict() == [{"type": "binary",
                                                              "required": True}]
    # no signature; its requirements given, as `log` gives them (else MLflow infers them in
    # a process of its own that imports TensorFlow)
    mlflow.pyfunc.save_model(tmp_path / "before", python_model=ImageClassifier(),
                             artifacts={ARTIFACT: locate(str(copy))},
                             pip_requirements=[f"tfyard=={version('tfyard')}"])
    before = mlflow.pyfunc.load_model(str(tmp_path / "before"))
    images = [files[0].read_bytes(), jpegs[1], str(secret), None, b"\x00not an image"]
    for model in (served, before):
        table = model.predict(images)
        assert list(table["class_name"][:2]) == [row["class_name"] for row in local[:2]]
        assert list(table["class_id"][2:]) == [None] * 3
        assert table["error"][2].startswith("a path or URL is never opened")
        assert table["error"][3] == "no image (the cell is null)"
        assert table["error"][4].startswith("cannot decode: not an image")
        json.dumps(table.to_dict(orient="records"), allow_nan=False)


def test_a_tracked_fit_leaves_the_users_mlflow_settings_as_they_were(
        mlflow_uri, experiment, tmp_path, digits_work, monkeypatch):
    import mlflow
    from mlflow.tracking._tracking_service import utils

    import tfyard
    from tfyard.tracking.mlflow_run import MODEL_TAG

    monkeypatch.chdir(tmp_path)   # where a lost URI would make MLflow write ./mlflow.db
    monkeypatch.setattr(utils, "_tracking_uri", utils._tracking_uri)   # put back afterwards
    own = f"sqlite:///{tmp_path}/own.db"
    mlflow.set_tracking_uri(own)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)   # tracking on, by the user's own
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", experiment)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "45")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    environ = dict(os.environ)
    tfyard.fit("cifar_resnet8", "digits", output_dir=str(tmp_path / "fit"),
               work_dir=str(digits_work), image_size=16, batch_size=32, train_steps=5,
               steps_per_loop=5, seed=3, num_gpus="0", jit_compile=False, quiet=True)
    (logged,) = runs(mlflow_uri, experiment)
    assert logged.data.tags[MODEL_TAG] == "logged"   # the model went through MLflow's URI
    assert dict(os.environ) == environ
    assert mlflow.get_tracking_uri() == own
    assert not (tmp_path / "mlflow.db").exists()
