"""`tfyard train` as members of real clusters started by `tfyard launch local`: all-reduce
workers, and each of the user's own models (tests/user_code/models.py) on a parameter-server
cluster, each tracked in MLflow (only the chief logs, once). The compiled one trains on its
parameter-server cluster, with its own figures, in
`tests/reliability/test_preemption.py::test_parameter_server_chief_sigterm_loses_nothing_and_a_lost_ps_restarts`
(one cluster fewer). The parameter-server job with an evaluator, and a worker killed on the
way, is
`tests/reliability/test_faults.py::test_killed_parameter_server_worker_is_replaced_without_a_job_restart`."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import run_tfyard
from tests.tracking.conftest import runs, steps
from tests.train.conftest import FAST, assert_learned, read_json, read_jsonl
from tests.train.task.test_user_models import MODELS, USER_CODE, USER_MODELS, user_model

pytestmark = pytest.mark.cluster
# Asynchronous updates add their own momentum to SGD's (Mitliagkas et al. 2016): the
# synchronous learning rate of FAST diverges, a smaller one learns.
ASYNC = ["--learning_rate", "0.02"]


def launch(tmp_path, work, layout: list[str], *train_flags, tracking=None, shown=False):
    """Train on the cluster `layout`; `tracking`: (server, experiment) given to every member
    as MLflow's variables, checked to hold one run that has each report once; `shown`: the
    members' progress lines shown (FAST is --quiet)."""
    flags = [flag for flag in FAST if not (shown and flag == "--quiet")]
    command = [sys.executable, "-m", "tfyard", "train", *flags, "--output_dir", tmp_path,
               "--work_dir", work, "--no_export", *train_flags]
    env = {} if tracking is None else {"MLFLOW_TRACKING_URI": tracking[0],
                                       "MLFLOW_EXPERIMENT_NAME": tracking[1]}
    result = run_tfyard("launch", "local", *layout, "--", *command, timeout=900, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    if tracking:
        (run,) = runs(*tracking)
        reported = [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")
                    if r["kind"] == "train"]
        assert steps(tracking[0], run.info.run_id, "loss") == reported
        assert run.info.status == "FINISHED"
    return result


def test_two_worker_all_reduce_ends_with_identical_weights(tmp_path, digits_work, mlflow_uri,
                                                           experiment):
    """--dtype auto: worker 1 takes worker 0's answer (both on this machine's hardware)."""
    result = launch(tmp_path, digits_work, ["--workers", "2"], "--train_steps", "40",
                    "--eval_every_epochs", "100", "--dtype", "auto",
                    tracking=(mlflow_uri, experiment), shown=True)
    progress = [line for line in result.stdout.splitlines() if "] step " in line]
    assert progress and all(line.startswith("[worker:0] step ") for line in progress)
    members = digits_work / "members"
    first, second = read_json(members / "worker-0.json"), read_json(members / "worker-1.json")
    assert first["strategy"] == "multi_worker_mirrored" and first["replicas"] == 2
    assert first["dtype"] == second["dtype"] == read_json(tmp_path / "run.json")["dtype"]
    assert f"{first['dtype']} (auto: " in result.stdout
    assert first["final_step"] == second["final_step"] == 40
    assert first["weights_digest"] == second["weights_digest"]
    assert_learned(tmp_path)


def test_a_user_script_trains_as_its_tf_config_role_on_two_workers(tmp_path):
    """The model_to_estimator successor: a script calling `tfyard.fit(build, input_fn)`
    (tests/user_code/job.py) runs as each all-reduce member, with no flag for its role."""
    job = USER_CODE / "job.py"
    result = run_tfyard("launch", "local", "--workers", "2", "--", sys.executable, job,
                        tmp_path / "out", timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    first, second = (read_json(tmp_path / f"worker-{i}.json") for i in (0, 1))
    assert (first["strategy"], first["replicas"]) == ("multi_worker_mirrored", 2)
    # each worker reads its shard (128 examples) in per-replica batches of 32 / 2
    assert first["global_batch"] == 32 and first["final_step"] == second["final_step"] == 16
    assert first["weights_digest"] == second["weights_digest"]


@pytest.mark.parametrize("name", sorted(set(USER_MODELS) - {"compiled"}))  # see above
def test_a_user_model_trains_on_a_parameter_server_cluster(tmp_path, digits_work, name,
                                                          mlflow_uri, experiment):
    """Chief, a worker and a ps import the user's module from its file; the chief reports
    the model's own figures (its export is tested on one device, test_user_models.py). One
    worker: each member is a TensorFlow process of ~10 s of CPU; two workers and an
    evaluator are test_faults.py's parameter-server job."""
    launch(tmp_path, digits_work, ["--chief", "--workers", "1", "--ps", "1"], *ASYNC,
           "--train_steps", "8", "--steps_per_loop", "4", *user_model(name),
           tracking=(mlflow_uri, experiment))
    summary = read_json(tmp_path / "summary.json")
    assert (summary["strategy"], summary["final_step"]) == ("parameter_server", 8)
    assert summary["model"] == f"{MODELS}:{name}"
    assert set(summary["eval"]) == {"loss", "top1", "top5"}
    train = [r for r in read_jsonl(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert train[-1]["step"] == 8 and "top1" in train[-1]
