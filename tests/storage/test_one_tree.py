"""One scenario, three places for its --output_dir: a local directory, an S3 prefix (moto's
server) and a GCS prefix (gcp-storage-emulator); the run store's promise (docs/data.md, "Runs
in a bucket": one tree) is that the same commands leave the same tree in each. As a user
runs them: a `tfyard train` SIGKILLed once its first checkpoint is in the place, then the
same command again (it resumes and finishes); `tfyard evaluate` and `tfyard predict` of that
run (the rows written into the place); a two-trial PBT `tfyard tune` study in the same
place. Then every file under the directory, every object under the prefix, is listed, and
the trees are compared path for path, and the keys of each run.json (the run's and each
trial's).

What differs by construction, and only that, is set aside, each with its reason where it is
done (`seen`): TensorBoard's events file names (time, host, pid), older checkpoints (a
bucket's publisher drops a save a newer one overtakes), the scratch space a local run keeps
in its --output_dir by default (`work/`), which trial PBT hands over to (the draws follow
the study's DIR). Everything else a user finds in one place is in the other two, and each
run.json has the same keys (a local run's `output_copy`, a bucket run's local copy, is null).

The emulator ignores GCS's generation preconditions, without which tfyard refuses a run in a
bucket (test_gcs.py), so here it is reached through `StoreProxy(generations=True)`, which
refuses a request whose ifGenerationMatch does not hold, as GCS does; the objects stay the
emulator's. One scenario takes ~20 s here (2 cores): ResNet-8 on 16 px digits, 60 steps."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import INHERITED, run_tfyard
from tests.reliability.conftest import wait_for
from tests.storage.conftest import gcs, gcs_endpoint, s3, s3_endpoint  # noqa: F401 - stores
from tests.storage.proxy import StoreProxy
from tests.storage.test_gcs import objects as gcs_objects
from tests.storage.test_s3_runs import objects as s3_objects
from tests.train.conftest import FAST, main_here
from tests.tune.conftest import write_space

pytest.importorskip("optuna")
BUCKET = "one-tree"
TRAIN = [*FAST, "--train_steps", "60", "--checkpoint_every_steps", "5"]
# test_bucket.py's real PBT study: two trials paused at step 7, the worse continuing from the
# better's checkpoint, each to step 14
TUNE = ["--metric", "validation/top1", "--mode", "max", "--trials", "2", "--parallel", "2",
        "--scheduler", "pbt", "--pbt_interval", "7", "--epochs", "0.3", "--eval_every_epochs",
        "0.15", "--no_export", *[a for a in FAST if a not in ("--learning_rate", "0.05")]]
EVENTS = re.compile(r"events\.out\.tfevents\.\d+\.[^/]+\.v2$")
HANDED = re.compile(r"^study/trials/\d+/pbt\.json$")
CHECKPOINT = re.compile(r"^(?P<run>.*)checkpoints/ckpt-(?P<step>\d+)\.")
OWN_SCRATCH = ("run/work/", "study/work/")   # the default --work_dir of a local run, trial


def scenario(root: str, saved, tree, tmp: Path) -> dict[str, bytes]:
    """The commands, on `root` (a directory or a bucket prefix: `saved(name)`, whether it
    holds `name`; `tree()`, its files); the tree they left there."""
    run = f"{root}/run"
    killed = subprocess.Popen([sys.executable, "-m", "tfyard", "train", *TRAIN, "--output_dir",
                               run], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    wait_for(lambda: saved("run/checkpoints/checkpoint"), killed)
    killed.kill()
    assert killed.wait() == -signal.SIGKILL
    # resumed in a process of its own, as the killed one was: its threads and TensorFlow's
    # state are the command's, not those an earlier test left in this worker
    resumed = run_tfyard("train", *TRAIN, "--output_dir", run)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    main_here("evaluate", "--output_dir", run)
    main_here("predict", "--output_dir", run, images(tmp), "--output",
              f"{root}/predictions.jsonl")
    space = write_space(tmp, "learning_rate: {loguniform: [0.01, 0.2]}\n")
    # a bucket study needs --storage; the local one is given the same kind (its default,
    # DIR/study.db, would be one more file there)
    main_here("tune", "--space", space, "--storage", f"sqlite:///{tmp / 'study.db'}",
              "--output_dir", f"{root}/study", *TUNE)
    return tree()


def images(tmp: Path) -> Path:
    """Three digits as PNGs, to predict."""
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    folder = tmp / "images"
    folder.mkdir()
    for number in (3, 5, 7):
        digit = load_digits().images[number].astype(np.uint8)[..., None] * 16
        (folder / f"{number}.png").write_bytes(tf.io.encode_png(digit).numpy())
    return folder


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def seen(tree: dict[str, bytes], local: bool) -> tuple[Counter, set[str]]:
    """What a user finds in `tree`, less what differs by construction: its paths (an events
    file's name a pattern) and, apart, the checkpoints older than each run's latest save."""
    latest: dict[str, int] = {}
    for name in tree:
        if found := CHECKPOINT.match(name):
            latest[found["run"]] = max(latest.get(found["run"], 0), int(found["step"]))
    paths, older = Counter(), set()
    for name in tree:
        found = CHECKPOINT.match(name)
        if found and int(found["step"]) < latest[found["run"]]:
            # the run's own copy keeps --keep_checkpoints of them; a bucket's publisher
            # uploads the newest save only and drops one a newer save overtook, so it holds
            # fewer (docs/data.md): compared as "the bucket's are some of the copy's"
            older.add(name)
        elif local and name.startswith(OWN_SCRATCH):
            # a local run's default --work_dir is OUTPUT_DIR/work (a local study's trials':
            # DIR/work/NNNN); a bucket run's is on local disk, never in the bucket
            # (docs/data.md): scratch (the digits records, members/), not the run
            continue
        elif HANDED.match(name):
            # which trial PBT hands over to follows the trials' draws, which a seeded study
            # derives from its DIR too (docs/tuning.md, "--seed reproduces through kills"):
            # one of them
            paths["study/trials/*/pbt.json"] += 1
        else:
            # TensorBoard names an events file by its time, host and pid: its count is
            # what a place can keep equal
            paths[EVENTS.sub("events.out.tfevents.*", name)] += 1
    return paths, older


def run_keys(tree: dict[str, bytes]) -> dict[str, set[str]]:
    """The keys of each run.json: the run's and each trial's."""
    return {name: set(json.loads(body)) for name, body in tree.items()
            if name.endswith("run.json")}


def digest(tree: dict[str, bytes]) -> str:
    return json.loads(tree["run/summary.json"])["weights_digest"]


def check_scenario(tree: dict[str, bytes]) -> None:
    """The scenario did what it says, in this place."""
    summary = json.loads(tree["run/summary.json"])
    assert 0 < summary["resumed_from_step"] < summary["final_step"] == 60
    assert {"run/checkpoints/ckpt-60.index", "run/export/saved_model/saved_model.pb"} <= \
        set(tree)
    rows = [json.loads(line) for line in tree["predictions.jsonl"].splitlines()]
    assert sorted(Path(row["path"]).name for row in rows) == ["3.png", "5.png", "7.png"]
    assert not any(row["error"] for row in rows)
    assert len([n for n in tree if n.endswith("/pbt.json")]) == 1   # the one handover
    assert {"study/tune.json", "study/trials.csv", "study/logs/0000.log",
            "study/trials/0001/checkpoints/checkpoint"} <= set(tree)
    assert not any(name.endswith(".tfyard-lease") for name in tree)


@pytest.fixture(scope="module")
def on_disk(tmp_path_factory) -> dict[str, bytes]:
    """The scenario on local disk: what the buckets' trees are compared with."""
    tmp = tmp_path_factory.mktemp("on-disk")
    with pytest.MonkeyPatch.context() as patch:   # made before the autouse scrub: its own
        for name in INHERITED:
            patch.delenv(name, raising=False)
        patch.setenv("XDG_CACHE_HOME", str(tmp / "cache"))
        root = tmp / "place"
        return scenario(str(root), lambda name: (root / name).exists(), lambda: files(root),
                        tmp)


def in_bucket(scheme: str, request, tmp_path: Path, monkeypatch) -> dict[str, bytes]:
    """The scenario under a prefix of a bucket on the suite's S3 or GCS server."""
    if scheme == "s3":
        client = request.getfixturevalue("s3")
        client.create_bucket(Bucket=BUCKET)
        return scenario(f"s3://{BUCKET}/team", lambda name: client.list_objects_v2(
            Bucket=BUCKET, Prefix=f"team/{name}")["KeyCount"] > 0,
            lambda: s3_objects(client, BUCKET, "team"), tmp_path)
    client = request.getfixturevalue("gcs")
    client.create_bucket(BUCKET)
    proxy = StoreProxy(request.getfixturevalue("gcs_endpoint"), generations=True)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", proxy.url)
    try:
        return scenario(f"gs://{BUCKET}/team",
                        lambda name: client.bucket(BUCKET).blob(f"team/{name}").exists(),
                        lambda: gcs_objects(client, BUCKET, "team"), tmp_path)
    finally:
        proxy.close()


@pytest.mark.slow
@pytest.mark.parametrize("place", ["local", "s3", "gs"])
def test_the_same_commands_leave_the_same_tree_in_every_place(place, on_disk, request,
                                                              tmp_path, monkeypatch):
    tree = on_disk if place == "local" else in_bucket(place, request, tmp_path, monkeypatch)
    check_scenario(tree)
    # --seed: a resumed run ends bit for bit where an unbroken one would, wherever it was
    # killed and wherever it lives
    assert digest(tree) == digest(on_disk)
    if place == "local":   # the scratch `seen` sets aside is there
        assert all(any(name.startswith(own) for name in tree) for own in OWN_SCRATCH)
    paths, older = seen(tree, local=place == "local")
    expected, kept = seen(on_disk, local=True)
    assert (paths - expected, expected - paths) == (Counter(), Counter())
    assert older <= kept
    assert run_keys(tree) == run_keys(on_disk)
