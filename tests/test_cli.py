"""The CLI surface: help, version, `cluster show`, one-line user errors, and flags declared
once."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import fields
from types import MappingProxyType

from tests.conftest import python_prints, run_tfyard
from tfyard import __version__, platform
from tfyard.cli import build_parser
from tfyard.train.options import TrainOptions

LEGACY = json.dumps({"cluster": {"master": ["h:2222"], "ps": ["h:2223"], "worker": ["h:2224"]},
                     "task": {"type": "master", "index": 0}, "environment": "cloud"})


def test_help_imports_neither_tensorflow_nor_optuna():
    code = ("import sys; from tfyard.cli import build_parser; build_parser(); "
            "print({'tensorflow', 'optuna'} & set(sys.modules) or None)")
    assert python_prints(code) == "None"


def test_track_imports_no_tensorflow():
    """`tfyard track` reads a run's files and logs them to MLflow: the modules it runs
    leave TensorFlow unloaded (seconds of CPU a call; a model is logged as its files)."""
    code = ("import sys; from tfyard.cli import train; import tfyard.train.outside.tracked, "
            "tfyard.train.rundir.plot, tfyard.predict.local, tfyard.tracking.mlflow_run; "
            "print('tensorflow' in sys.modules)")
    assert python_prints(code) == "False"


def test_help_and_version():
    result = run_tfyard("--help")
    assert result.returncode == 0 and "cluster" in result.stdout
    assert run_tfyard("--version").stdout.strip() == f"tfyard {__version__}"


def test_cluster_show_legacy_json():
    result = run_tfyard("cluster", "show", "--json", "--num_gpus", "0", env={"TF_CONFIG": LEGACY})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["tf_config"]["cluster"]["chief"] == ["h:2222"]
    assert report["tf_config"]["task"] == {"type": "chief", "index": 0}
    assert (report["role"], report["strategy"], report["behaviour"]) == (
        "chief", "parameter_server", "train")


def test_cluster_show_tf2_text(tmp_path):
    path = tmp_path / "tf_config.json"
    path.write_text(json.dumps({"cluster": {"worker": ["h:1", "h:2"]},
                                "task": {"type": "worker", "index": 1}}))
    result = run_tfyard("cluster", "show", "--num_gpus", "0", env={"TF_CONFIG_FILE": str(path)})
    assert result.returncode == 0, result.stderr
    assert "role:       worker:1" in result.stdout
    assert "multi_worker_mirrored" in result.stdout


def test_user_errors_are_one_line_exit_2():
    bad = run_tfyard("cluster", "show", env={"TF_CONFIG": "{oops"})
    assert bad.returncode == 2
    assert bad.stderr.startswith("tfyard: error: TF_CONFIG is not valid JSON")
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    flag = run_tfyard("cluster", "show", "--no-such-flag")
    assert flag.returncode == 2 and flag.stderr.count("\n") == 1
    assert flag.stderr.startswith("tfyard cluster show: error: unrecognized arguments")
    short = run_tfyard("train", "--lr", "0.05")   # not an abbreviation of --lr_schedule
    assert short.returncode == 2 and short.stderr.count("\n") == 1
    assert "unrecognized arguments: --lr 0.05 (did you mean --learning_rate?)" in short.stderr


def test_cluster_show_lists_tensorflows_variables_not_terraforms():
    env = {"TF_CLI_CONFIG_FILE": "/home/u/.terraformrc", "TF_VAR_region": "eu",
           "TF_LOG": "DEBUG", "TF_CPP_MIN_LOG_LEVEL": "1", "TF_XLA_FLAGS": "--x"}
    result = run_tfyard("cluster", "show", "--num_gpus", "0", "--json", env=env)
    shown = json.loads(result.stdout)["environment"]
    assert "TF_CPP_MIN_LOG_LEVEL" in shown and "TF_XLA_FLAGS" in shown
    assert not {"TF_CLI_CONFIG_FILE", "TF_VAR_region", "TF_LOG"} & set(shown)


def test_cluster_show_masks_secrets_in_the_environment():
    env = {"TF_CONFIG": LEGACY, "TFYARD_REGISTRY_PASSWORD": "hunter2-secret",
           "TFYARD_API_TOKEN": "tok-123", "TFYARD_WORK_DIR": "/scratch"}
    for args in (["--json"], []):
        result = run_tfyard("cluster", "show", "--num_gpus", "0", *args, env=env)
        assert result.returncode == 0, result.stderr
        assert "hunter2-secret" not in result.stdout and "tok-123" not in result.stdout
        assert "TFYARD_REGISTRY_PASSWORD" in result.stdout and "/scratch" in result.stdout


def test_the_package_needs_no_extra_outside_its_spark_and_ray_modules():
    """`make demo` installs the package alone: no module but the Spark and Ray ones imports
    pyspark, ray or the test tools (nor the MLflow model's, which imports MLflow, and MLflow
    imports pyspark where it is installed)."""
    code = ("import importlib, pkgutil, sys, tfyard\n"
            "for info in pkgutil.walk_packages(tfyard.__path__, 'tfyard.'):\n"
            "    if not info.name.endswith(('.spark', '.ray', '.__main__', 'tracking.model')):\n"
            "        importlib.import_module(info.name)\n"
            "print(sorted({'pyspark', 'ray', 'pytest', 'hypothesis'}"
            " & {name.split('.')[0] for name in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_keras_starts_without_its_optional_imports_yet_they_still_work():
    """The CLI keeps Keras from loading scikit-learn, matplotlib and pandas, tf.summary's
    TensorBoard stand-in from loading boto3 and fsspec, and TensorFlow's legacy Keras from
    loading SciPy, at start-up (seconds per process); once those are loaded, plots, Spark's
    pandas batches and buckets import them as usual."""
    code = ("import sys; from tfyard import keras_startup; keras_startup.skip_optional_imports()"
            "; import keras, tensorflow as tf; tf.summary.histogram"
            "; import tensorboard.compat.tensorflow_stub.io.gfile"
            "; print(sorted(set().union(*keras_startup.OPTIONAL.values()) & set(sys.modules)))"
            "; from sklearn.datasets import load_digits; import matplotlib.pyplot, pandas, boto3"
            ", scipy.sparse"
            "; print(len(load_digits().images), len(pandas.DataFrame({'a': [1, 2]})),"
            " boto3.client('s3', region_name='us-east-1').meta.region_name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "1797", "2", "us-east-1"]


def _commands(parser, prefix="tfyard"):
    """(command line, parser) for `parser` and every subcommand under it."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, f"{prefix} {name}")


def test_every_commands_platform_flags_come_from_the_one_declaration(monkeypatch):
    """A platform flag is added by `platform.add_platform_flag`: with its spellings
    declared differently, every command that takes it follows."""
    classic = {spelling for name in platform.FLAGS for spelling in platform.spellings(name)}
    monkeypatch.setattr(platform, "spellings", lambda name: (f"--{name}", f"--tfyard-{name}"))
    taken, stray = set(), []
    for command, parser in _commands(build_parser()):
        for action in parser._actions:
            if action.dest in platform.FLAGS or classic & set(action.option_strings):
                taken.add(action.dest)
                if action.option_strings != list(platform.spellings(action.dest)):
                    stray.append(f"{command} {' '.join(action.option_strings)}")
    assert taken == set(platform.FLAGS)
    assert not stray, "declare these with platform.add_platform_flag: " + ", ".join(stray)


# flags named like a TrainOptions field that mean something else in their command
OTHER_MEANING = {("tfyard evaluate", "--export"),  # the exported model, not "write one"
                 ("tfyard predict", "--batch_size"),  # images per model call, no training
                 ("tfyard tune", "--seed")}  # the study's: its sampler's, then each trial's


def test_every_commands_training_flags_come_from_the_one_declaration(monkeypatch):
    """A flag of a TrainOptions field is added by `add_option_arguments`: with the field's
    spellings declared differently, every command that takes it follows."""
    options = {f.name: f for f in fields(TrainOptions) if not f.metadata["platform"]}
    classic = {spelling for f in options.values()
               for spelling in (f"--{f.name}", *f.metadata["aliases"], *f.metadata["negate"])}
    for name, f in options.items():
        meta = dict(f.metadata, aliases=(*f.metadata["aliases"], f"--tfyard-{name}"))
        if meta["negate"]:
            meta["negate"] = (*meta["negate"], f"--tfyard-no-{name}")
        monkeypatch.setattr(f, "metadata", MappingProxyType(meta))
    taken, stray = set(), []
    for command, parser in _commands(build_parser()):
        for action in parser._actions:
            spellings = set(action.option_strings)  # none: a positional, not a flag
            if not spellings or not (action.dest in options or classic & spellings) \
                    or {(command, s) for s in spellings} & OTHER_MEANING:
                continue
            taken.add(action.dest)
            if not any(s.startswith("--tfyard-") for s in spellings):
                stray.append(f"{command} {' '.join(action.option_strings)}")
    assert {"epochs", "dataset", "batch_size", "image_size", "dtype", "export"} <= taken
    assert not stray, "declare these with add_option_arguments: " + ", ".join(stray)


def test_the_commands_end_still_joins_threads_runs_exit_handlers_and_flushes():
    """`tfyard` ends its process before the interpreter's teardown (`cli.run`): what an exit
    must still do is done first, and the command's exit status kept."""
    code = ("import atexit, sys, threading, time\n"
            "from tfyard import cli\n"
            "def command():\n"
            "    atexit.register(print, 'exit handler ran')\n"
            "    threading.Thread(target=lambda: (time.sleep(0.5), print('thread done'))).start()\n"
            "    print('buffered', end='')\n"
            "    return 3\n"
            "cli.main = command\n"
            "cli.run()\n")
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert ended.returncode == 3, ended.stderr
    assert ended.stdout == "bufferedthread done\nexit handler ran\n"


def test_a_forked_commands_end_runs_after_the_servers_imports_exit_handlers():
    """The fork server registers the end before its imports (`cli.ends_last`), so a forked
    trial runs its own exit handlers, then those of the modules the server imported, then
    ends: a plain run's order (registered in the child, the end would come first and skip
    them)."""
    code = ("import atexit, os, sys\n"
            "from tfyard import cli\n"
            "status = cli.ends_last()   # as tfyard.cli.forkserver does, before its imports\n"
            "atexit.register(print, 'an imported module handler')\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    def command():\n"
            "        atexit.register(print, 'the command handler')\n"
            "        return 4\n"
            "    cli.main = command\n"
            "    cli.run(status)\n"
            "print('child', os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)\n"
            "os._exit(0)\n")
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    assert ended.stdout == "the command handler\nan imported module handler\nchild 4\n", \
        ended.stdout + ended.stderr
