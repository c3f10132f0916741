"""The container's training command from tfyard-cmd.txt, run here with /data/... mapped.

No Docker on this machine: replacing the image paths (/data -> code, /data/data -> data,
/data/output -> output) and running in the code directory, as WORKDIR does, proves the
command, the ENV defaults and the platform flags are right.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

from tests.pack.conftest import commands, dockerfile_instructions
from tfyard.cli import main


def _mapped(argv, mapping):
    out = []
    for arg in argv:
        for image_path, host_path in mapping:  # longest image path first
            if arg == image_path or arg.startswith(image_path + "/"):
                arg = str(host_path) + arg[len(image_path):]
                break
        out.append(arg)
    return [sys.executable if arg == "python" else arg for arg in out]


@pytest.mark.parametrize("which", ["platform", "local_test"])
def test_training_command_runs_to_completion(code_dir, tmp_path, which):
    data, output = tmp_path / "data", tmp_path / "output"
    data.mkdir()
    rng = np.random.default_rng(0)
    np.save(data / "x.npy", rng.normal(size=(16, 4)).astype("float32"))
    np.save(data / "y.npy", rng.integers(0, 2, size=16))
    assert main(["pack", "--code_path", str(code_dir), "--main", "train.py",
                 "--image", "trainer", "--train_params", "--steps 3"]) == 0
    context = code_dir.parent
    platform_line, local_line = commands(context / "tfyard-cmd.txt")[:2]
    mapping = [("/data/output", output), ("/data/data", data), ("/data", code_dir)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TFYARD_")}
    if which == "platform":
        argv = shlex.split(platform_line)
        steps = dockerfile_instructions((context / "Dockerfile").read_text())
        for key, value in (args.split("=", 1) for op, args in steps if op == "ENV"):
            env[key] = _mapped([value], mapping)[0]
    else:
        docker_argv = shlex.split(local_line)
        argv = docker_argv[docker_argv.index("trainer:latest") + 1:]
    run = subprocess.run(_mapped(argv, mapping), cwd=code_dir, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    done = json.loads((output / "done.json").read_text())
    assert done["steps"] == 3 and done["cwd"] == str(code_dir) and np.isfinite(done["loss"])
    assert (output / "model.keras").stat().st_size > 0
