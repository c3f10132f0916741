"""Predict, evaluate and the SavedModel's image-bytes signature see an image alike."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tfyard
from tfyard.train.evaluate import evaluate_output


def test_predict_gives_evaluates_top1_and_names(run, folder):
    rows = tfyard.predict(run, [folder / "validation"], top_k=2)
    right = [row["class_name"] == Path(row["path"]).parent.name for row in rows]
    top1 = sum(right) / len(rows)
    assert len(rows) == 24 and not any(row["error"] for row in rows)
    assert top1 == evaluate_output(str(run))["top1"]
    assert json.loads((run / "run.json").read_text())["class_names"] == ["blue", "green", "red"]
    assert (run / "export" / "class_names.txt").read_text().split() == ["blue", "green", "red"]
    assert all(len(row["top_names"]) == 2 and row["top_names"][0] == row["class_name"]
               for row in rows)


SERVE = """
import json, sys
import tensorflow as tf
model = tf.saved_model.load(sys.argv[1])
images = [open(p, "rb").read() for p in sys.argv[2:]]
out = model.signatures["serving_default"](image_bytes=tf.constant(images))
print(json.dumps({"names": [n.decode() for n in out["class_name"].numpy()],
                  "probabilities": out["probabilities"].numpy().tolist()}))
"""


def test_the_bytes_signature_answers_as_predict_in_a_fresh_process(run, folder):
    files = sorted((folder / "validation").rglob("*.jpg"))[::3]
    rows = tfyard.predict(run / "export", files, top_k=3)
    served = subprocess.run([sys.executable, "-c", SERVE, str(run / "export" / "saved_model"),
                             *map(str, files)], capture_output=True, text=True, timeout=300)
    assert served.returncode == 0, served.stderr[-2000:]
    answer = json.loads(served.stdout.strip().splitlines()[-1])
    assert answer["names"] == [row["class_name"] for row in rows]
    for row, probabilities in zip(rows, answer["probabilities"], strict=True):
        assert abs(max(probabilities) - row["score"]) < 1e-5
