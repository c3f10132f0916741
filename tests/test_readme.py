"""The README and the docs pages as written.

The README is a front door: at most 250 lines, its links resolve, and each of its code
blocks is either marked `<!-- run -->` (and run here, in order, in one empty directory: its
five-minute tour) or says on its first line that it is not run. So is each block of every
user page of the docs site (all but architecture.md and api.md), whose marked blocks run
here too, a page's in order in one directory: the tracking page's against a real `mlflow
server` on loopback, in a copy of the directory the tour leaves, and its registered model
served; the data page's bucket against moto's S3 server; the fine-tuning page's recipe; the
others with the stand-ins for what the page assumes the reader has (CIFAR-10 binary files,
MNIST, an input function, a trained run, photos), written here. A block marked
`<!-- run: NEED -->` needs a multi-process cluster, Spark or Ray (NEED is the pytest marker,
`cluster`, `spark` or `ray`) and runs in a test with that marker, so `make test` schedules
it with the other heavy tests. Every run is held to `TFYARD_MAX_STEPS` steps, the cap
docs/training.md documents, so a page's full-length command runs as written.

A block runs as written: each shell line that is one plain `tfyard` command through
`tfyard.cli.main` with the same arguments in this process (an interpreter and a TensorFlow
import saved per line), the other shell lines with bash, a Python block with `exec`, but a
Python block that opens with `# PATH.py` is that file, which the page shows: it is written
there. The
tracking page's `tfyard track` runs with bash: the console script's own process
(tests/tracking/test_mlflow.py runs `track` in-process, and its SIGKILLed run is a fresh
tracked `tfyard train`)."""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import logging
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest

from tests import shared_servers
from tests.data.helpers import write_cifar
from tests.train.conftest import read_json
from tfyard.platform import MAX_STEPS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
FENCE = re.compile(r"(?P<mark><!-- run(?:: (?P<need>\w+))? -->\n)?```(?P<lang>\w+)\n"
                   r"(?P<body>.*?)```", flags=re.S)
NEEDS = ("cluster", "spark", "ray")   # the pytest markers a block may need
NOT_RUN = "# not run by the README test: "
DOCS_NOT_RUN = "# not run by the docs test: "
USER_PAGES = sorted(path.name for path in DOCS.glob("*.md")
                    if path.name not in ("architecture.md", "api.md"))
STEPS = 3   # TFYARD_MAX_STEPS for every page's runs
FILE_BLOCK = re.compile(r"# ([\w/.-]+\.py)\n")
SHELL_SYNTAX = set("|&;<>$`")   # a line with any of these is bash's to run


def page(name: str) -> str:
    return (DOCS / name).read_text()


def fenced(text: str) -> list[tuple[bool, str, str]]:
    """Each top-level code block of `text`: (marked to run, language, body)."""
    return [(bool(found["mark"]), found["lang"], found["body"]) for found in FENCE.finditer(text)]


def marked(text: str, needs: tuple[str | None, ...] = (None,)) -> list[tuple[str, str]]:
    """The blocks of `text` marked to run that need one of `needs` (None: nothing, a plain
    `<!-- run -->`), in the page's order: (language, body)."""
    return [(found["lang"], found["body"]) for found in FENCE.finditer(text)
            if found["mark"] and found["need"] in needs]


def commands(text: str) -> list[list[str]]:
    """The block's command lines, continuations joined and comments dropped."""
    lines = text.replace("\\\n", " ").splitlines()
    return [shlex.split(line, comments=True) for line in lines if line.strip()]


def shell_steps(body: str) -> list[list[str] | str]:
    """A shell block as the steps that run it, in order: the argv of each command that is
    one plain `tfyard` command, and the other commands, those in a row together, as bash
    text (a command is a line, with its continuations and the lines of a quoted string)."""
    steps: list[list[str] | str] = []
    command = ""
    for line in body.replace("\\\n", " ").splitlines(keepends=True):
        command += line
        try:
            argv = shlex.split(command, comments=True)
        except ValueError:   # a quote still open: the command goes on
            continue
        if argv[:1] == ["tfyard"] and not SHELL_SYNTAX & set("".join(argv)):
            steps.append(argv)
        elif argv:
            steps.append(steps.pop() + command if steps and isinstance(steps[-1], str)
                         else command)
        command = ""
    assert not command, f"an unclosed quote: {command}"
    return steps


def bash(text: str) -> str:
    """What bash printed running `text` in this directory (this interpreter's `tfyard`
    first on PATH: tests/conftest.py), in a process group of its own that is stopped after
    it: a server the text starts in the background (`... &`), as a reader would, ends with
    the text."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", text], stdout=out,
                                 stderr=err, text=True, start_new_session=True)
        try:
            code = shell.wait(timeout=600)
        finally:
            shared_servers.stop_group(shell.pid)
        out.seek(0), err.seek(0)
        printed, said = out.read(), err.read()
    assert code == 0, f"{text}\n{printed[-2000:]}{said[-3000:]}"
    return printed


def run_python(body: str) -> None:
    """`exec` a Python block as `python -c` runs it: as `__main__`, a module with no file
    (so a function it defines is named as `python -c` names it, not by pytest's file)."""
    module = types.ModuleType("__main__")
    kept = sys.modules["__main__"]
    sys.modules["__main__"] = module
    try:
        exec(compile(body, "<string>", "exec"), module.__dict__)
    finally:
        sys.modules["__main__"] = kept


def run_block(lang: str, body: str) -> str:
    """Run one block as written in this directory (see the module's docstring); what it
    printed."""
    from tfyard.cli import main

    printed = io.StringIO()
    if lang == "python" and (file := FILE_BLOCK.match(body)):
        Path(file[1]).parent.mkdir(parents=True, exist_ok=True)
        Path(file[1]).write_text(body)
        return ""
    with contextlib.redirect_stdout(printed):
        if lang == "python":
            run_python(body)
        for step in shell_steps(body) if lang in ("sh", "bash") else []:
            if isinstance(step, str):
                printed.write(bash(step))
            else:
                assert main(step[1:]) == 0, step
    return printed.getvalue()


def run_blocks(blocks: list[tuple[str, str]]) -> list[str]:
    """Run `blocks` in order in this directory; what each printed. The `tfyard` logger,
    which an in-process command configures, is left as it was found."""
    assert blocks, "no block marked <!-- run -->"
    logger = logging.getLogger("tfyard")
    kept = list(logger.handlers), logger.level, logger.propagate
    try:
        return [run_block(lang, body) for lang, body in blocks]
    finally:
        logger.handlers[:], logger.level, logger.propagate = kept


@pytest.fixture(scope="module")
def tour(tmp_path_factory) -> tuple[Path, list[str]]:
    """The README's tour, run once in an empty directory: its directory and what each block
    printed. The tour's test checks them; the tracking page runs in a copy."""
    directory = tmp_path_factory.mktemp("tour")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(directory)
        return directory, run_blocks(marked(README))


def test_the_readme_is_a_short_front_door_whose_blocks_say_whether_they_run():
    assert README.count("\n") <= 250
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        assert "://" in target or (ROOT / target).exists(), target
    blocks = fenced(README)
    assert len(blocks) == README.count("```") // 2   # no block the pattern missed
    for to_run, _, body in blocks:
        assert to_run or body.startswith(NOT_RUN), body


@pytest.mark.slow
def test_the_readme_tour_runs_as_written(tour):
    directory, printed = tour
    assert (directory / "tour" / "curves.png").is_file()
    assert read_json(directory / "tour" / "summary.json")["model"] == "cifar_resnet20"
    rows = [line for line in printed[2].splitlines() if line.startswith("digit")]
    assert [row.split(",")[0] for row in rows] == ["digit0.png", "digit1.png", "digit2.png"]
    assert printed[3].startswith("[(") and printed[3].count("(") == 2, printed[3]


@pytest.mark.slow
def test_the_tracking_page_runs_as_written_in_the_tours_directory(tour, tmp_path, monkeypatch,
                                                                  mlflow_uri):
    """Its run tracked, an untracked run (the tour's) tracked after the fact, and the
    registered model scoring the tour's first image, against a real `mlflow server` on
    loopback (the session's); then that model served by `mlflow models serve` on the port
    the page names, each of its two requests answered (the server stopped after)."""
    from tests.tracking.conftest import runs

    shutil.copytree(tour[0], tmp_path / "tour-dir")
    monkeypatch.chdir(tmp_path / "tour-dir")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "digits")
    shell, python, serve = marked(page("tracking.md"))
    assert shell[0] == serve[0] == "sh" and python[0] == "python"
    train, track = shell_steps(shell[1])
    assert (train[:2], track[:2]) == (["tfyard", "train"], ["tfyard", "track"])
    run_blocks([("sh", shlex.join(train))])   # in this process, as the tour's lines
    bash(shlex.join(track))   # the console script's own process
    printed = run_blocks([python])
    names = sorted(found.info.run_name for found in runs(mlflow_uri, "digits"))
    assert "class_name" in printed[-1], printed[-1]
    assert names == ["a", "tour"]
    with page_port(int(re.search(r"--port (\d+)", serve[1])[1])):
        served = bash(serve[1])
    # each answer as curl prints it (no newline after it), among the server's access lines
    answers = [json.JSONDecoder().raw_decode(served, found.start())[0]
               for found in re.finditer(r'\{"predictions"', served)]
    assert [len(answer["predictions"]) for answer in answers] == [1, 1], served
    assert answers[0] == answers[1] and "class_name" in answers[0]["predictions"][0], served


@contextlib.contextmanager
def page_port(port: int):
    """The loopback `port` a page's server takes as written, held by this test alone: it
    is free, and a second run of the suite on this machine (another checkout's) waits for
    it here rather than meeting this server on it. A page gives its own port, and the text
    runs as written: so no free port is chosen for it."""
    with open(Path(tempfile.gettempdir()) / f"tfyard-docs-port-{port}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError as exc:
                pytest.fail(f"port {port}, which the page names, is taken here: {exc}")
        yield


def not_run(name: str) -> list[tuple[str, int, str]]:
    """Each block of the user page `name` not marked to run: (page, line, its first line)."""
    text = page(name)
    return [(name, text[:found.start()].count("\n") + 1, found["body"].split("\n", 1)[0])
            for found in FENCE.finditer(text) if not found["mark"]]


@pytest.mark.parametrize("name", USER_PAGES)
def test_the_pattern_finds_every_block_of_a_user_page(name):
    assert len(fenced(page(name))) == page(name).count("```") // 2


@pytest.mark.parametrize("name, line, first", [block for name in USER_PAGES
                                               for block in not_run(name)],
                         ids=lambda value: str(value)[:60])
def test_a_user_page_block_not_run_says_why(name, line, first):
    """Every block the suite does not run is listed here (a test each), with its reason."""
    assert first.startswith(DOCS_NOT_RUN) and first[len(DOCS_NOT_RUN):].strip(), \
        f"{name}:{line} is neither marked <!-- run --> nor says why it is not run: {first}"


def run_page(name: str, directory: Path, monkeypatch,
             needs: tuple[str | None, ...] = (None,)) -> list[str]:
    """The blocks of the page `name` marked to run that need one of `needs` (as `marked`),
    in order in `directory`, each run held to STEPS steps: what each printed."""
    monkeypatch.chdir(directory)
    monkeypatch.setenv(MAX_STEPS, str(STEPS))
    return run_blocks(marked(page(name), needs))


def test_a_block_needs_what_a_heavy_marker_names():
    """A block's NEED is a marker of pyproject.toml's that its test carries: a misspelt one
    would leave the block run by no test."""
    for name in ("README.md", *USER_PAGES):
        text = README if name == "README.md" else page(name)
        assert {found["need"] for found in FENCE.finditer(text)} <= {None, *NEEDS}, name


@pytest.mark.parametrize("command", ["tfyard cluster show", "--name job-a"],
                         ids=["a line bash runs", "a line run in this process"])
def test_a_planted_wrong_flag_fails_its_block(tmp_path, monkeypatch, capsys, command):
    """The runner runs what a block says: a flag no command takes, planted into a copy of
    one of the scale page's blocks, fails it."""
    lang, body = next(block for block in marked(page("scale.md")) if command in block[1])
    monkeypatch.chdir(tmp_path)
    with pytest.raises((AssertionError, SystemExit)) as failed:
        run_blocks([(lang, body.replace(command, f"{command} --no_such_flag"))])
    said = f"{failed.value}{capsys.readouterr().err}"
    assert "unrecognized arguments: --no_such_flag" in said, said


def test_the_scale_page_runs_as_written(tmp_path, monkeypatch):
    """`cluster show` and `pack` (no docker)."""
    printed = run_page("scale.md", tmp_path, monkeypatch)
    assert "strategy:   parameter_server" in printed[0], printed[0]
    assert (tmp_path / "tfyard-k8s.yaml").is_file() and (tmp_path / "Dockerfile").is_file()


def assert_trained(run: Path, strategy: str) -> None:
    summary = read_json(run / "summary.json")
    assert (summary["strategy"], summary["final_step"]) == (strategy, STEPS), summary


@pytest.mark.cluster
def test_the_scale_pages_local_clusters_run_as_written(tmp_path, monkeypatch):
    """An all-reduce pair, then a chief, two workers, a parameter server and an evaluator:
    every member a process on 127.0.0.1."""
    run_page("scale.md", tmp_path, monkeypatch, ("cluster",))
    assert_trained(tmp_path / "out", "multi_worker_mirrored")
    assert_trained(tmp_path / "out-ps", "parameter_server")


@pytest.mark.spark
def test_the_scale_pages_spark_block_runs_as_written(tmp_path, monkeypatch):
    """`launch spark` on a local master, started in this process as a reader's `tfyard`
    starts it."""
    pytest.importorskip("pyspark")
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    run_page("scale.md", tmp_path, monkeypatch, ("spark",))
    assert_trained(tmp_path / "out-spark", "multi_worker_mirrored")


@pytest.mark.ray
def test_the_scale_pages_ray_block_runs_as_written(ray_address, tmp_path, monkeypatch):
    """On the suite's local Ray, which `launch ray` without `--address` uses: the Ray this
    process is connected to."""
    run_page("scale.md", tmp_path, monkeypatch, ("ray",))
    assert_trained(tmp_path / "out-ray", "multi_worker_mirrored")


INPUT = """
import numpy as np
import tensorflow as tf

def input_fn(input_context):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 8, 8, 1)).astype("float32")
    y = (x.mean(axis=(1, 2, 3)) > 0).astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16)

eval_fn = input_fn
"""


def write_cifar10(root: Path) -> None:
    """A CIFAR-10 stand-in, four records a class in each file (one 128-batch step)."""
    labels = list(range(10)) * 4
    write_cifar(root, "cifar10", {**{f"data_batch_{i}.bin": labels for i in range(1, 6)},
                                  "test_batch.bin": labels})


@pytest.mark.slow
@pytest.mark.cluster
def test_the_training_page_runs_as_written(tmp_path, monkeypatch):
    """With stand-ins for what the page leaves to the reader (CIFAR-10 and MNIST files,
    `nets/data.py`'s input function, the checkout's examples/), the user's model trained on
    a local cluster too; the modules a block imports from the directory are forgotten
    after."""
    from tests.examples.test_seed_scripts import write_mnist_npz

    write_cifar10(tmp_path / "cifar-10-batches-bin")
    write_mnist_npz(tmp_path / "mnist")
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "data.py").write_text(INPUT)
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        run_page("training.md", tmp_path, monkeypatch, (None, "cluster"))
    finally:
        for name in ("nets.mine", "nets.data", "nets"):
            sys.modules.pop(name, None)
    summaries = {run: read_json(tmp_path / run / "summary.json")
                 for run in ("out", "digits-run", "mine", "out_fit", "mnist-run", "resnet-run")}
    assert summaries["out"]["model"] == summaries["resnet-run"]["model"] == "cifar_resnet56"
    assert (tmp_path / "digits-run" / "curves.png").is_file()
    assert (summaries["mine"]["model"], summaries["mine"]["optimizer"]) == \
        ("nets.mine:build", "Adam")
    assert summaries["out_fit"]["final_step"] == summaries["digits-run"]["final_step"] == STEPS
    assert (tmp_path / "mnist-run" / "mnist.h5").is_file()
    assert_trained(tmp_path / "mine2", "multi_worker_mirrored")


FINE_TUNE = page("fine-tuning.md")
SMALL_RUN = ["--image_size", "32", "--batch_size", "8", "--train_steps", "2", "--no_export",
             "--no_jit_compile"]


def test_the_fine_tune_recipe_runs_as_written(tmp_path, monkeypatch, capsys):
    """Both stages and the `tfyard.fit` form, with the ImageNet file written here in Keras
    Applications' layout (no top) and a small photo folder; each run made small (and without
    XLA's compile) by the options appended to it, and run in this process: what is loaded and
    frozen is the point, not a fresh interpreter."""
    import keras

    from tests.data.helpers import write_folder
    from tests.train.conftest import write_applications_h5
    from tfyard.cli import main

    fine_tune = re.findall(r"```(\w+)\n(.*?)```", FINE_TUNE, flags=re.S)
    shell, = [text for lang, text in fine_tune if lang == "sh"]
    stage1, stage2 = [command for command in commands(shell) if command]
    weights = stage1[stage1.index("--init_checkpoint") + 1]
    base = keras.applications.MobileNetV2(include_top=False, weights=None,
                                          input_shape=(32, 32, 3))
    write_applications_h5(base, tmp_path / weights)
    write_folder(tmp_path / "photos", {"cat": 8, "dog": 8})
    monkeypatch.chdir(tmp_path)
    lines = []
    for command in (stage1, stage2):
        assert command[:2] == ["tfyard", "train"], command
        assert main([*command[1:], *SMALL_RUN]) == 0
        lines += [line for line in capsys.readouterr().out.splitlines()
                  if "initialized from" in line]
    count = len(base.weights)
    assert lines[0].startswith(f"tfyard: initialized from {weights}: {count} of {count + 2} "
                               "weights; head started fresh (not in the source); frozen: ")
    assert lines[1] == f"tfyard: initialized from stage1: {count + 2} of {count + 2} weights"
    assert read_json(tmp_path / "stage2" / "run.json")["init"]["head"] == "loaded"

    call, = [text for lang, text in fine_tune if lang == "python"]
    call = call.replace("epochs=5,", "epochs=5, image_size=32, batch_size=8, train_steps=2, "
                                     "export=False, jit_compile=False,")
    exec(compile(call, "fine-tuning.md", "exec"), {"__name__": "__main__"})
    record = read_json(tmp_path / "mine" / "run.json")["init"]
    assert record["loaded"] == count and record["head"] == "fresh (not in the source)"
    assert len(record["frozen_layers"]) == len({w.path.split("/")[0] for w in base.weights})


@pytest.mark.slow
def test_the_data_page_runs_as_written_against_a_real_s3_server(tmp_path, monkeypatch):
    """Its photos converted and inspected locally, then into a bucket, and a run in the
    bucket trained on them, evaluated, plotted and predicting, against moto's S3 server with
    the bucket the page assumes."""
    import boto3

    from tests.storage.conftest import SETTINGS, moto_server

    for name in [name for name in os.environ if name.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with moto_server() as endpoint:
        for name, value in {**SETTINGS, "AWS_ENDPOINT_URL_S3": endpoint}.items():
            monkeypatch.setenv(name, value)
        boto3.client("s3").create_bucket(Bucket="my-bucket")
        (tmp_path / "page").mkdir()
        printed = run_page("data.md", tmp_path / "page", monkeypatch)
        keys = {found["Key"] for found in boto3.client("s3").list_objects_v2(
            Bucket="my-bucket", Prefix="runs/resnet-a/")["Contents"]}
    assert "0 problems" in printed[1] and (tmp_path / "page" / "tfrecords" / "labels.txt").is_file()
    assert "s3://my-bucket/photos-tfr" in printed[2], printed[2]
    assert {"runs/resnet-a/summary.json", "runs/resnet-a/curves.png"} <= keys
    rows = [line for line in printed[-1].splitlines() if line.startswith("photos/")]
    assert len(rows) == 20, printed[-1]


@pytest.mark.slow
def test_the_predict_page_runs_as_written_on_the_tours_run(tour, tmp_path, monkeypatch):
    """On a copy of the tour's run as `out` and its export as `copied/export`, with the
    images the page names (digits as PNG and JPEG)."""
    from PIL import Image
    from sklearn.datasets import load_digits

    shutil.copytree(tour[0] / "tour", tmp_path / "out", ignore=shutil.ignore_patterns("work"))
    shutil.copytree(tour[0] / "tour" / "export", tmp_path / "copied" / "export")
    images = [Image.fromarray((pixels * 15).astype("uint8")).convert("RGB")
              for pixels in load_digits().images[:5]]
    for path, image in zip(["photos/a/0.png", "photos/b/1.jpg", "more/x/2.jpg", "one.png",
                            "cat.jpg"], images, strict=True):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        image.save(tmp_path / path)
    printed = run_page("predict.md", tmp_path, monkeypatch)
    assert printed[0].count("\n") == 1 + 4 + 2, printed[0]   # a header, then the rows
    assert (tmp_path / "rows.parquet").is_file()


@pytest.mark.slow
def test_the_tuning_page_runs_as_written(tmp_path, monkeypatch):
    """Both searches, eight trials each, every trial held to the step cap."""
    run_page("tuning.md", tmp_path, monkeypatch)
    for study in ("runs/study", "runs/study-py"):
        summary = read_json(tmp_path / study / "tune.json")
        counts = summary["trials"]
        assert counts["complete"] + counts["pruned"] == 8 and not counts["fail"], counts
        best = read_json(Path(summary["best_trial"]["run_dir"]) / "summary.json")
        assert best["final_step"] == STEPS
