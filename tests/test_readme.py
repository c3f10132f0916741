"""The README and the docs pages as written.

The README is a front door: at most 250 lines, its links resolve, and each of its code
blocks is either marked `<!-- run -->` (and run here, in order, in one empty directory: its
five-minute tour) or says on its first line that it is not run. The docs pages' marked
blocks run too: the tracking page's against a real `mlflow server` on loopback, in a copy of
the directory the tour leaves; the training page's "Train your own Keras model" (its
`nets/mine.py`, its `tfyard train` command line and its `tfyard.fit` call, with CIFAR-10
binary files and an input function written here, which the page leaves to the user); and
the fine-tuning page's recipe, both stages and the `tfyard.fit` form.

A block runs as written: each shell line that is one plain `tfyard` command through
`tfyard.cli.main` with the same arguments in this process (an interpreter and a TensorFlow
import saved per line), the other shell lines with bash, a Python block with `exec`. The
tracking page's `tfyard track` runs with bash: the console script's own process
(tests/tracking/test_mlflow.py runs `track` in-process, and its SIGKILLed run is a fresh
tracked `tfyard train`)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.data.helpers import write_cifar
from tests.train.conftest import read_json

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"
FENCE = re.compile(r"(<!-- run -->\n)?```(\w+)\n(.*?)```", flags=re.S)
NOT_RUN = "# not run by the README test: "
SHELL_SYNTAX = set("|&;<>$`")   # a line with any of these is bash's to run


def page(name: str) -> str:
    return (DOCS / name).read_text()


def fenced(text: str) -> list[tuple[bool, str, str]]:
    """Each top-level code block of `text`: (marked to run, language, body)."""
    return [(bool(mark), lang, body) for mark, lang, body in FENCE.findall(text)]


def marked(text: str) -> list[tuple[str, str]]:
    """The blocks of `text` marked `<!-- run -->`: (language, body)."""
    return [(lang, body) for to_run, lang, body in fenced(text) if to_run]


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
    first on PATH)."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", text], capture_output=True,
                            text=True, timeout=600, env={**os.environ, "PATH": path})
    assert result.returncode == 0, f"{text}\n{result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result.stdout


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
    with contextlib.redirect_stdout(printed):
        if lang == "python":
            run_python(body)
        for step in shell_steps(body) if lang == "sh" else []:
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
    loopback (the session's)."""
    from tests.tracking.conftest import runs

    shutil.copytree(tour[0], tmp_path / "tour-dir")
    monkeypatch.chdir(tmp_path / "tour-dir")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "digits")
    shell, python = marked(page("tracking.md"))
    assert shell[0] == "sh" and python[0] == "python"
    train, track = shell_steps(shell[1])
    assert (train[:2], track[:2]) == (["tfyard", "train"], ["tfyard", "track"])
    run_blocks([("sh", shlex.join(train))])   # in this process, as the tour's lines
    bash(shlex.join(track))   # the console script's own process
    printed = run_blocks([python])
    names = sorted(found.info.run_name for found in runs(mlflow_uri, "digits"))
    assert "class_name" in printed[-1], printed[-1]
    assert names == ["a", "tour"]


@pytest.mark.parametrize("name", ["scale.md", "data.md"])
def test_the_docs_pages_cheap_commands_run_as_written(tmp_path, monkeypatch, name):
    """`cluster show`, `pack` (no docker), `data convert` and `data inspect`."""
    monkeypatch.chdir(tmp_path)
    printed = run_blocks(marked(page(name)))
    if name == "scale.md":
        assert "strategy:   parameter_server" in printed[0], printed[0]
        assert (tmp_path / "tfyard-k8s.yaml").is_file() and (tmp_path / "Dockerfile").is_file()
    else:
        assert "0 problems" in printed[-1] and (tmp_path / "tfrecords" / "labels.txt").is_file()


SECTION = page("training.md").split("## Train your own Keras model", 1)[1].split("\n## ", 1)[0]
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", SECTION, flags=re.S)

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


def blocks(language: str) -> list[str]:
    return [text for lang, text in BLOCKS if lang == language]


def test_the_user_model_example_runs_as_written(tmp_path, monkeypatch):
    """The module, its `tfyard train` line and its `tfyard.fit` call, in this process: the
    module is imported from the working directory as a fresh `tfyard` would (and forgotten
    after)."""
    module, = [b for b in blocks("python") if b.startswith("# nets/mine.py")]
    (tmp_path / "nets").mkdir()
    (tmp_path / "nets" / "mine.py").write_text(module)
    labels = list(range(10)) * 4
    write_cifar(tmp_path / "cifar-10-batches-bin", "cifar10",
                {**{f"data_batch_{i}.bin": labels for i in range(1, 6)},
                 "test_batch.bin": labels})
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        train = commands(blocks("sh")[0])[0]
        assert train[:2] == ["tfyard", "train"], train
        run_blocks([("sh", shlex.join(train))])
        summary = read_json(tmp_path / "out" / "summary.json")
        assert (summary["model"], summary["dataset"]) == ("nets.mine:build", "cifar10")
        assert summary["optimizer"] == "Adam" and "accuracy" in summary["eval"]

        call, = [b for b in blocks("python") if "tfyard.fit(" in b]
        steps = int(re.search(r"train_steps=(\d+)", call)[1])
        script = "from nets.mine import build\n" + INPUT + call + \
            "print(summary['final_step'], summary['dataset'], sorted(summary['eval']))\n"
        printed, = run_blocks([("python", script)])
    finally:
        for name in ("nets.mine", "nets"):
            sys.modules.pop(name, None)
    assert printed.split()[-4:] == [str(steps), "input_fn", "['accuracy',", "'loss']"]
    assert read_json(tmp_path / "out_fit" / "summary.json")["final_step"] == steps


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
