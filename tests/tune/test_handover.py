"""PBT's handover in a bucket, on the suite's S3 server with real TensorFlow checkpoints:
the donor's latest checkpoint becomes the recipient's, in its prefix (the pointer naming it
alone, the recipient's other checkpoints gone) and in its local copy, the same files; a copy
of the recipient from before the handover, on another node, is set aside at its resume."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.storage.conftest import s3, s3_endpoint  # noqa: F401 - the fixtures used here
from tfyard.train.rundir.lease import take_bucket_lease
from tfyard.tune.handover import hand_over

tf = pytest.importorskip("tensorflow")
BUCKET = "tune-handover"


def _saved(folder, offset: float) -> tf.Variable:
    """Checkpoints at steps 3 and 7 of one variable (offset + step) in `folder`."""
    value = tf.Variable(0.0)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=value), str(folder), 3)
    for step in (3, 7):
        value.assign(offset + step)
        manager.save(checkpoint_number=step)
    return value


def _uploaded(client, folder, prefix: str) -> None:
    for name in os.listdir(folder):
        client.upload_file(str(folder / name), BUCKET, f"{prefix}/checkpoints/{name}")


def _keys(client, prefix: str) -> dict[str, bytes]:
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/checkpoints/")
    return {o["Key"].rpartition("/")[2]: client.get_object(Bucket=BUCKET, Key=o["Key"])
            ["Body"].read() for o in listed["Contents"]}


def test_the_donors_checkpoint_becomes_the_recipients_in_the_bucket_and_its_copy(
        s3, tmp_path):  # noqa: F811
    s3.create_bucket(Bucket=BUCKET)
    _saved(tmp_path / "donor", 100.0)
    _uploaded(s3, tmp_path / "donor", "donor")
    copy = tmp_path / "copy"
    _saved(copy / "checkpoints", 0.0)
    _uploaded(s3, copy / "checkpoints", "recipient")
    url = f"s3://{BUCKET}/recipient"
    hand_over(f"s3://{BUCKET}/donor", url, str(copy), '[{"step": 7}]\n')

    theirs = _keys(s3, "recipient")
    donors = {name: data for name, data in _keys(s3, "donor").items()
              if name.startswith("ckpt-7.")}
    assert theirs.keys() == {*donors, "checkpoint"}   # ckpt-3 gone
    assert all(theirs[name] == data for name, data in donors.items())
    assert os.listdir(copy / "checkpoints") and sorted(os.listdir(copy / "checkpoints")) == \
        sorted(theirs)
    assert (copy / "checkpoints" / "checkpoint").read_bytes() == theirs["checkpoint"]
    state = tf.train.get_checkpoint_state(str(copy / "checkpoints"))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["ckpt-7"]
    restored = tf.Variable(0.0)
    tf.train.Checkpoint(v=restored).restore(state.model_checkpoint_path).assert_consumed()
    assert float(restored) == 107.0   # the donor's state at step 7
    schedule = s3.get_object(Bucket=BUCKET, Key="recipient/pbt.json")["Body"].read()
    assert schedule == (copy / "pbt.json").read_bytes() == b'[{"step": 7}]\n'
    with take_bucket_lease(url):   # released: the recipient's resume takes it
        pass


def test_a_copy_from_before_the_handover_is_set_aside_on_its_node(s3, tmp_path):  # noqa: F811
    """The handover starts the recipient's lineage anew: its copy on another node (a Ray
    trial's, left from before the round, at the same step) no longer continues the bucket,
    so its resume takes the donor's state from there rather than upload its own over it."""
    import json
    import shutil

    from tfyard.train.rundir.reconcile import reconciled

    s3.create_bucket(Bucket=BUCKET)
    _saved(tmp_path / "donor", 100.0)
    _uploaded(s3, tmp_path / "donor", "donor")
    copy, elsewhere = tmp_path / "copy", tmp_path / "node" / "copy"
    _saved(copy / "checkpoints", 0.0)
    (copy / "run.json").write_text(json.dumps({"model": "m", "starts": ["first"]}) + "\n")
    _uploaded(s3, copy / "checkpoints", "recipient")
    s3.upload_file(str(copy / "run.json"), BUCKET, "recipient/run.json")
    shutil.copytree(copy, elsewhere)   # the trial's copy on its node, as the round found it
    url = f"s3://{BUCKET}/recipient"
    hand_over(f"s3://{BUCKET}/donor", url, str(copy), "[]\n")

    record = json.loads(s3.get_object(Bucket=BUCKET, Key="recipient/run.json")["Body"].read())
    assert record["model"] == "m" and record["starts"][0] == "first" and \
        len(record["starts"]) == 2
    assert json.loads((copy / "run.json").read_text()) == record   # this copy continues it
    with take_bucket_lease(url):
        reconciled(url, str(elsewhere))
    assert [path.name for path in (tmp_path / "node").iterdir() if path.name != "copy"]
    state = tf.train.get_checkpoint_state(str(elsewhere / "checkpoints"))
    restored = tf.Variable(0.0)
    tf.train.Checkpoint(v=restored).restore(state.model_checkpoint_path).assert_consumed()
    assert float(restored) == 107.0   # the donor's, from the bucket


def test_a_round_a_killed_tune_left_midway_is_finished_once(s3, tmp_path):  # noqa: F811
    """Killed after the recipient's index went: the round kept in the study is finished by
    the next tune, and finishing it again changes nothing."""
    from tfyard.runfiles.place import StudyPlace
    from tfyard.tune.pbt import PAUSE, ROUND, SCHEDULE, Population
    from tfyard.tune.space import Param

    optuna = pytest.importorskip("optuna")
    s3.create_bucket(Bucket=BUCKET)
    place = StudyPlace(f"s3://{BUCKET}/study")
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(direction="maximize", storage=storage)
    trials = [study.ask() for _ in range(2)]
    for trial, offset in zip(trials, (0.0, 100.0), strict=True):
        trial.set_user_attr("run_dir", place.run_dir(trial.number))
        copy = place.local_run(place.run_dir(trial.number), place.work_dir(trial.number))
        _saved(os.path.join(copy, "checkpoints"), offset)
        _uploaded(s3, Path(copy) / "checkpoints",
                  f"study/trials/{trial.number:04d}")
    s3.delete_object(Bucket=BUCKET, Key="study/trials/0000/checkpoints/ckpt-7.index")
    params = {"learning_rate": 0.012}
    study.set_user_attr(ROUND, {"step": 7, "moves": [[0, 1, params, 0.1, 0.9]]})
    population = Population([Param("learning_rate", "loguniform", (0.001, 1.0))], 7, True,
                            1, place, storage)
    (said,) = population.finish(study, "validation/top1")
    assert "trial 0" in said and "trial 1's checkpoint at step 7" in said
    study.set_user_attr(ROUND, {"step": 7, "moves": [[0, 1, params, 0.1, 0.9]]})
    population.finish(study, "validation/top1")   # a second kill, after all of it
    assert study.user_attrs[ROUND] is None and study.user_attrs[PAUSE] == 14
    entry = {"step": 7, "donor": 1, "params": params}
    assert study.trials[0].user_attrs[SCHEDULE] == [entry]
    ours, theirs = _keys(s3, "study/trials/0000"), _keys(s3, "study/trials/0001")
    assert {name: data for name, data in ours.items() if name != "checkpoint"} == \
        {name: data for name, data in theirs.items() if name.startswith("ckpt-7.")}
    assert 'all_model_checkpoint_paths: "ckpt-7"' in ours["checkpoint"].decode()
    assert "ckpt-3" not in ours["checkpoint"].decode()
