"""The GPU slice (`make gpu`): a short bfloat16 training with XLA on the GPU, its resume, and
an export that answers alike on the GPU and on the CPU. Skipped where TensorFlow sees no GPU
(every CI machine); run on one with `make gpu`."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import STARTED_WITH_DEVICES
from tests.train.conftest import FAST, read_json

pytestmark = pytest.mark.gpu

# The GPU run: FAST's small model and data, on the GPU, in bfloat16, XLA on, its
# announcement shown (FAST is --quiet).
ON_GPU = [flag for flag in FAST
          if flag not in ("--no_jit_compile", "--num_gpus", "0", "--quiet")] + [
    "--num_gpus", "1", "--dtype", "bfloat16", "--xla"]

PREDICT = """
import json, sys
import numpy as np
import tensorflow as tf
served = tf.saved_model.load(sys.argv[1])
images = np.random.default_rng(0).normal(size=(16, 16, 16, 3)).astype("float32")
result = served.serve(tf.constant(images))
print(json.dumps({"gpus": len(tf.config.list_physical_devices("GPU")),
                  "probabilities": result["probabilities"].numpy().tolist()}))
"""


def device_env(gpu: bool) -> dict:
    """This environment with the suite's own GPUs (gpu) or none."""
    env = dict(os.environ)
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif STARTED_WITH_DEVICES is None:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        env["CUDA_VISIBLE_DEVICES"] = STARTED_WITH_DEVICES
    return env


def run(argv: list, gpu: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True,
                            env=device_env(gpu), timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def gpu():
    found = run(["-c", "import tensorflow as tf; "
                 "print(len(tf.config.list_physical_devices('GPU')))"]).stdout
    if int(found.split()[-1]) == 0:
        pytest.skip("TensorFlow sees no GPU here")


def test_bf16_xla_training_on_the_gpu_resumes_and_its_export_agrees_with_the_cpu(
        gpu, tmp_path, digits_work):
    common = ["-m", "tfyard", "train", *ON_GPU, "--output_dir", tmp_path,
              "--work_dir", digits_work]
    first = run([*common, "--train_steps", "20"])
    summary = read_json(tmp_path / "summary.json")
    assert summary["final_step"] == 20 and summary["replicas"] == 1
    assert summary["dtype"] == "bfloat16" and summary["jit_compile"] is True
    announced = (first.stdout + first.stderr).split("tfyard: global batch")[0]
    assert "on 1 GPU: " in announced and ", XLA" in announced

    resumed = run([*common, "--train_steps", "30"])
    assert "resumed from step 20" in resumed.stdout + resumed.stderr
    assert read_json(tmp_path / "summary.json")["resumed_from_step"] == 20

    export = tmp_path / "export" / "saved_model"
    on_gpu = json.loads(run(["-c", PREDICT, export]).stdout.splitlines()[-1])
    on_cpu = json.loads(run(["-c", PREDICT, export], gpu=False).stdout.splitlines()[-1])
    assert on_gpu["gpus"] >= 1 and on_cpu["gpus"] == 0
    import numpy as np

    np.testing.assert_allclose(on_gpu["probabilities"], on_cpu["probabilities"], atol=2e-2)
