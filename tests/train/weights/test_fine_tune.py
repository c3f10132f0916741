"""Start from trained weights (issue 30): every source form, strict matching with a report,
the classifier head started fresh, refusals before any step, and freezing.

The model is tests/user_code/fine_tune.py, written as a user writes one. The matching tests
run in this process on models they build; the training tests run `tfyard train` for real, in
this process (`tfyard.cli.main`) except where two CPU replicas or a cluster need fresh ones.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tests.conftest import run_here, run_tfyard
from tests.data.helpers import write_folder
from tests.train.conftest import (
    main_here,
    read_json,
    user_code_imported,
    write_applications_h5,
)
from tests.user_code.fine_tune import build, mlp
from tfyard.errors import UserError
from tfyard.train.options import TrainOptions
from tfyard.train.weights import freezing, pretrained

USER_CODE = Path(__file__).resolve().parents[2] / "user_code" / "fine_tune.py"
SHAPE = (8, 8, 3)
SMALL = ["--image_size", "8", "--batch_size", "16", "--num_gpus", "0", "--seed", "5",
         "--steps_per_loop", "4", "--no_jit_compile", "--no_export"]


def trained_like(classes: int = 10, **kwargs):
    """`build`'s model with distinct, seeded weights (moving statistics included)."""
    model = build(classes, SHAPE, **kwargs)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        value = rng.normal(size=weight.shape).astype("float32")
        weight.assign(np.abs(value) if "variance" in weight.path else value)
    return model


def initialize(model, source, **options):
    options = TrainOptions(init_checkpoint=str(source), **options)
    head = freezing.head_layer(model, model.outputs[0].shape[-1])
    return pretrained.initialize(model, options, head)


def equal_weights(a, b) -> list[bool]:
    return [np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a.weights, b.weights,
                                                                  strict=True)]


def save_every_form(model, directory: Path) -> dict[str, Path]:
    """`model` written in each form --init_checkpoint reads (the run directory is tested
    with a real run below)."""
    forms = {"keras": directory / "m.keras", "weights.h5": directory / "m.weights.h5",
             "full .h5": directory / "m.h5", "applications .h5": directory / "app.h5",
             "checkpoint prefix": directory / "ckpts" / "ckpt-1",
             "checkpoint directory": directory / "ckpts"}
    model.save(forms["keras"])
    model.save_weights(forms["weights.h5"])
    model.save(forms["full .h5"])
    write_applications_h5(model, forms["applications .h5"])
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), forms["checkpoint directory"],
                               1, checkpoint_name="ckpt").save(checkpoint_number=1)
    return forms


@pytest.fixture(scope="module")
def forms(tmp_path_factory):
    source = trained_like()
    return source, save_every_form(source, tmp_path_factory.mktemp("forms"))


@pytest.mark.parametrize("form", ["keras", "weights.h5", "full .h5", "applications .h5",
                                  "checkpoint prefix", "checkpoint directory"])
def test_every_form_loads_every_weight_and_a_new_head_starts_fresh(forms, form):
    source, paths = forms
    same = build(10, SHAPE)
    record, line = initialize(same, paths[form])
    assert all(equal_weights(source, same)), line
    assert line == f"initialized from {paths[form]}: 14 of 14 weights"
    assert (record["loaded"], record["weights"], record["head"]) == (14, 14, "loaded")
    prefix = paths["checkpoint prefix"]   # the index first, then the data shards
    files = [paths[form]] if paths[form].is_file() else [
        prefix.with_suffix(".index"), *sorted(prefix.parent.glob("ckpt-1.data-*"))]
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in files)).hexdigest()
    assert record["fingerprint"] == f"sha256:{digest}"

    fewer = build(2, SHAPE)   # another class count: every weight but the head's
    head_before = [w.numpy() for w in fewer.get_layer("head").weights]
    record, line = initialize(fewer, paths[form])
    assert equal_weights(source, fewer) == [True] * 12 + [False] * 2
    assert all(np.array_equal(a, w.numpy())
               for a, w in zip(head_before, fewer.get_layer("head").weights, strict=True))
    assert line.endswith("12 of 14 weights; head started fresh (10 -> 2 classes)")
    assert record["head"] == "fresh (10 -> 2 classes)"


def test_a_nested_base_finds_its_layers_in_a_flat_file(forms, tmp_path):
    """A user's model around a base model (the Keras Applications way) loads a flat file of
    the base's layers by their names; its own head is not in the file and starts fresh."""
    import keras

    source, paths = forms
    base = build(10, SHAPE)
    inputs = keras.Input(SHAPE)
    features = keras.Model(base.input, base.get_layer("bn2").output, name="base")(inputs)
    pooled = keras.layers.GlobalAveragePooling2D()(features)
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(pooled))
    record, line = initialize(model, paths["applications .h5"])
    assert line.endswith("12 of 14 weights; head started fresh (not in the source)")
    assert all(np.array_equal(model.get_layer("base").get_layer(name).weights[i].numpy(),
                              source.get_layer(name).weights[i].numpy())
               for name in ("c1", "bn1", "c2", "bn2") for i in range(2))
    assert record["unused_in_source"] == 2   # the source's own head


@pytest.mark.parametrize(("relative", "message"), [
    ({"body": False}, "6 weight(s) missing from the source (c2/kernel [3, 3, 8, 16]"),
    ({"body_kernel": 5}, "1 with another shape in the source (model vs source: "
                         "c2/kernel [3, 3, 8, 16] vs [5, 5, 8, 16])"),
])
def test_a_source_that_does_not_fit_is_refused_and_the_flags_that_allow_it(
        tmp_path, relative, message):
    """A weight the source lacks or holds with another shape is one line, naming it with its
    shape; --init_exclude (and --init_allow_missing for missing ones) let the rest load."""
    source = tmp_path / "source.weights.h5"
    trained_like(**relative).save_weights(source)
    model = build(10, SHAPE)
    with pytest.raises(UserError, match="does not fit net") as refused:
        initialize(model, source)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    record, line = initialize(model, source, init_exclude=("c2", "bn2"))
    assert record["excluded"] == 6 and "6 excluded (--init_exclude)" in line


def test_missing_weights_by_name_start_fresh_with_allow_missing(tmp_path):
    source = tmp_path / "app.h5"
    write_applications_h5(trained_like(body=False), source)
    model = build(10, SHAPE)
    with pytest.raises(UserError, match=r"6 weight\(s\) missing from the source \(c2/kernel "
                                        r"\[3, 3, 8, 16\]"):
        initialize(model, source)
    record, line = initialize(model, source, init_allow_missing=True)
    assert record["missing_started_fresh"] == 6
    assert line.endswith("6 of 14 weights; head started fresh (source [8, 10], model [16, "
                         "10]); 6 not in the source, started fresh (--init_allow_missing)")


def test_sources_that_cannot_serve_are_one_line_each(tmp_path):
    other = tmp_path / "mlp.keras"
    mlp(10, SHAPE).save(other)
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5")
    empty_zip = tmp_path / "empty.keras"
    with zipfile.ZipFile(empty_zip, "w") as archive:
        archive.writestr("config.json", "{}")
    empty_run = tmp_path / "run"
    empty_run.mkdir()
    cases = {other: "shares no weight with net", text: "not a weights file",
             empty_zip: "holds no Keras weights", empty_run: "no checkpoint in this directory",
             tmp_path / "absent": "no such file or directory"}
    for source, message in cases.items():
        with pytest.raises(UserError, match=message) as refused:
            initialize(build(10, SHAPE), source)
        assert "\n" not in str(refused.value)


def test_patterns_select_layers_from_the_start_of_their_names():
    model = build(10, SHAPE)
    assert freezing.freeze(model, frozen=("c", "bn1")) == ["c1", "bn1", "c2"]
    assert [w.path for w in model.trainable_variables] == [
        "bn2/gamma", "bn2/beta", "head/kernel", "head/bias"]
    model = build(10, SHAPE)
    assert freezing.freeze(model, trainable=("head",)) == ["c1", "bn1", "c2", "bn2"]
    assert freezing.describe_frozen(["c1", "bn1", "c2", "bn2"]) == \
        "frozen: c1, bn1, c2, ... (4 layers)"
    with pytest.raises(UserError, match="--freeze 'conv' matches no layer of net"):
        freezing.freeze(build(10, SHAPE), frozen=("conv",))
    with pytest.raises(UserError, match="nothing is left to train"):
        freezing.freeze(build(10, SHAPE), frozen=(".",))
    with pytest.raises(UserError, match=r"--trainable 'c\[': 'c\[' is not a regular expression"):
        TrainOptions(trainable="c[")


@pytest.fixture(scope="module")
def source_run(tmp_path_factory, digits_work):
    """A real run of the user's model on the digits (10 classes): the source to start from."""
    out = tmp_path_factory.mktemp("source-run")
    main_here("train", "--model", f"{USER_CODE}:build", "--dataset", "digits", *SMALL,
              "--train_steps", "8", "--quiet", "--output_dir", out, "--work_dir", digits_work)
    return out


@pytest.fixture(scope="module")
def two_classes(tmp_path_factory):
    """A small image folder of two classes: the new task."""
    data = tmp_path_factory.mktemp("two-classes")
    write_folder(data / "train", {"cat": 24, "dog": 24})
    write_folder(data / "validation", {"cat": 4, "dog": 4})
    return data


def checkpoint_weights(run: Path) -> dict[str, np.ndarray]:
    """The model weights of a run's newest checkpoint, by weight path."""
    from tfyard.train.weights.weight_files import open_source

    with open_source(str(run)) as source:
        return {key: source.read(key) for key in source.shapes}


def fine_tune(capture, source_run, data, out, *flags, cpu_replicas=1):
    """`tfyard train` from `source_run` on `data`: here (`capture`: capfd), or on two CPU
    replicas in a fresh process (this one's TensorFlow has started)."""
    argv = ["train", "--model", f"{USER_CODE}:build", "--dataset", "imagefolder", "--data_dir",
            data, *SMALL, "--train_steps", "8", "--output_dir", out, "--init_checkpoint",
            source_run, *flags]
    if cpu_replicas > 1:
        return run_tfyard(*argv, "--cpu_replicas", cpu_replicas, "--ds", "mirrored")
    with user_code_imported():
        return run_here(capture, *argv)


@pytest.mark.parametrize(("flags", "frozen", "replicas"), [
    (["--freeze", "c1,bn1"], ["c1", "bn1"], 2),
    (["--trainable", "c2,bn2,head"], ["c1", "bn1"], 1),
    (["--fine_tune"], ["c1", "bn1", "c2", "bn2"], 1),
])
def test_frozen_layers_end_bit_equal_to_the_source(source_run, two_classes, tmp_path, capfd,
                                                    flags, frozen, replicas):
    """Frozen layers do not change at all, batch-norm statistics included, on one device and
    on two mirrored replicas; the layers that train do; the 2-class head starts fresh."""
    out = tmp_path / "out"
    result = fine_tune(capfd, source_run, two_classes, out, *flags, cpu_replicas=replicas)
    assert result.returncode == 0, result.stderr[-3000:]
    listed = ", ".join(frozen[:3]) + (", ..." if len(frozen) > 3 else "")
    assert (f"initialized from {source_run}: 12 of 14 weights; head started fresh (10 -> 2 "
            f"classes); frozen: {listed} ({len(frozen)} layers)") in result.stdout
    before, after = checkpoint_weights(source_run), checkpoint_weights(out)
    for path, value in after.items():
        layer = path.split("/")[-2]
        if layer in frozen:
            assert np.array_equal(value, before[path]), path
        elif layer != "head":
            assert not np.array_equal(value, before[path]), path
    record = read_json(out / "run.json")["init"]
    assert record["frozen_layers"] == frozen and record["head"] == "fresh (10 -> 2 classes)"
    assert read_json(out / "summary.json")["replicas"] == replicas


def test_a_refused_source_stops_before_any_step(two_classes, tmp_path, capfd):
    out = tmp_path / "out"
    result = fine_tune(capfd, tmp_path / "nothing.keras", two_classes, out)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"tfyard: error: --init_checkpoint {tmp_path / 'nothing.keras'}: no such file or "
        "directory; give a run directory, a checkpoint prefix (out/checkpoints/ckpt-200), a "
        ".keras file, a .weights.h5 file or a Keras .h5 file"]
    assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()


def test_a_resume_keeps_its_checkpoint_and_never_reads_the_source_again(
        source_run, two_classes, tmp_path, capfd):
    """A fine-tune stopped at step 8 and rerun to 16 ends bit-identical to an unbroken one,
    with its source gone by then: the run's own checkpoint wins; naming another source warns."""
    source = tmp_path / "source"
    shutil.copytree(source_run, source)
    whole, split = tmp_path / "whole", tmp_path / "split"
    flags = ["--freeze", "c1,bn1", "--train_steps", "16"]
    assert fine_tune(capfd, source, two_classes, whole, *flags).returncode == 0
    assert fine_tune(capfd, source, two_classes, split, "--freeze", "c1,bn1").returncode == 0
    shutil.rmtree(source)
    resumed = fine_tune(capfd, source, two_classes, split, *flags)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (f"--init_checkpoint {source} not applied: the run resumes from its own checkpoint"
            in resumed.stdout)
    assert "resumed from step 8" in resumed.stdout
    digest = read_json(whole / "summary.json")["weights_digest"]
    assert read_json(split / "summary.json")["weights_digest"] == digest
    assert read_json(split / "run.json")["init"]["source"] == str(source)   # kept from step 0
    other = fine_tune(capfd, source_run, two_classes, split, *flags[:2], "--train_steps", "20")
    assert other.returncode == 0, other.stderr[-3000:]
    assert (f"tfyard: warning: --init_checkpoint {source_run} differs from the {source} this "
            "run started from; it resumes from its own checkpoint and applies neither"
            in other.stderr + other.stdout)
    record = read_json(split / "run.json")   # the source the weights came from, kept
    assert record["init_checkpoint"] == str(source) and record["init"]["source"] == str(source)
    again = fine_tune(capfd, source_run, two_classes, split, *flags[:2], "--train_steps", "24")
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"differs from the {source} this run started from" in again.stderr + again.stdout


@pytest.mark.cluster
@pytest.mark.parametrize("layout", [["--workers", "2"], ["--chief", "--workers", "1", "--ps",
                                                           "1"]])
def test_every_cluster_member_starts_from_the_loaded_weights(
        source_run, two_classes, tmp_path, layout):
    """All-reduce workers each load the source (their weights stay identical, so a member
    that started elsewhere would end elsewhere); the parameter-server chief loads into the ps
    variables. Either way the frozen layers end bit-equal to the source."""
    out, work = tmp_path / "out", tmp_path / "work"
    command = [sys.executable, "-m", "tfyard", "train", "--model", f"{USER_CODE}:build",
               "--dataset", "imagefolder", "--data_dir", two_classes, *SMALL,
               "--train_steps", "8", "--output_dir", out, "--work_dir", work,
               "--init_checkpoint", source_run, "--freeze", "c1,bn1"]
    result = run_tfyard("launch", "local", *layout, "--", *command, timeout=900)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "initialized from" in result.stdout
    before, after = checkpoint_weights(source_run), checkpoint_weights(out)
    assert all(np.array_equal(after[p], before[p]) for p in after if p.split("/")[0] in
               ("c1", "bn1"))
    assert not np.array_equal(after["c2/kernel"], before["c2/kernel"])
    if "--ps" not in layout:
        first, second = (read_json(work / "members" / f"worker-{i}.json") for i in (0, 1))
        assert first["strategy"] == "multi_worker_mirrored" and first["final_step"] == 8
        assert first["weights_digest"] == second["weights_digest"]
    else:
        assert read_json(out / "summary.json")["strategy"] == "parameter_server"


def test_unnamed_layers_match_though_keras_numbered_them_on(tmp_path):
    """Keras names a model's unnamed layers after those built before it in the process
    (`conv2d_2` ...): layers named alike are paired in order, so a model built later still
    loads a legacy .h5 or a checkpoint written from an earlier one."""
    import keras

    def unnamed(classes):
        inputs = keras.Input(SHAPE)
        x = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 3)(inputs))
        x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(4, 3)(x))
        return keras.Model(inputs, keras.layers.Dense(classes)(x))

    source = unnamed(10)
    for weight in source.weights:
        weight.assign(weight.numpy() + 1.0)
    source.save(tmp_path / "full.h5")
    tf.train.Checkpoint(model=source).save(tmp_path / "ckpts" / "ckpt")
    for path in (tmp_path / "full.h5", tmp_path / "ckpts"):
        model = unnamed(3)
        assert model.weights[0].path != source.weights[0].path   # numbered on
        _, line = initialize(model, path)
        assert line.endswith("8 of 10 weights; head started fresh (10 -> 3 classes)")
        assert equal_weights(source, model) == [True] * 8 + [False] * 2
