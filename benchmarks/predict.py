"""`tfyard predict` against the script a Keras user writes, on photo-sized JPEGs (issue 31).

1,500 JPEGs of 1024x768 (views of scikit-learn's two sample photos: crops at random scales,
mirrors and colour shifts, quality 90, so the files hold real photographic detail), a slim
model at 224 px (`mobilenet_v1_025` by default) trained for one step by `tfyard train` so
its export exists. Each side is one whole process, timed from start to exit, and the sides
take turns round after round, their order rotated each round, so a neighbour's burst on this
shared machine hits them alike:
- `tfyard`: `tfyard predict --output_dir RUN DIR --output rows.csv`;
- `keras`: `keras.utils.image_dataset_from_directory(DIR, labels=None, image_size=(224,
  224), shuffle=False)`, the same normalisation, `model.predict` on `export/model.keras`,
  the top class of each file written to a csv.
The ratio is the median over rounds of keras's time over tfyard's (target >= 1.5).

It also reports the JPEG scale `data.preprocess.eval_image` picks for these files, and that
predictions stay those of evaluation: `tfyard evaluate`'s top-1 on the run's held-out images
against `tfyard predict`'s on the same files (the same function decides the scale for both),
and how many top-1 classes a full-size decode would change.

The same photos and run, scored by `--on spark` and `--on ray` against a local predict:
`predict_at_scale.py` (issue 32).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

KERAS_SCRIPT = """
import csv, sys
import keras, numpy as np
data_dir, model_path, output = sys.argv[1:4]
mean, std = np.array({mean}), np.array({std})
images = keras.utils.image_dataset_from_directory(data_dir, labels=None, image_size=(224, 224),
                                                  shuffle=False, batch_size=32)
paths = images.file_paths
model = keras.models.load_model(model_path, compile=False)
scores = model.predict(images.map(lambda x: (x - mean) / std), verbose=0)
with open(output, "w", newline="") as stream:
    writer = csv.writer(stream)
    writer.writerow(["path", "class_id", "score"])
    for path, row in zip(paths, scores):
        writer.writerow([path, int(row.argmax()), float(row.max())])
"""


def write_photos(root: str, count: int, classes: int = 2) -> None:
    """`count` 1024x768 JPEG views of the sample photos, spread over `classes` folders."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = [Image.fromarray(p) for p in load_sample_images().images]
    rng = np.random.RandomState(0)
    for i in range(count):
        photo = photos[i % len(photos)]
        scale = rng.uniform(0.6, 1.0)
        width, height = int(photo.width * scale), int(photo.height * scale)
        left = rng.randint(0, photo.width - width + 1)
        top = rng.randint(0, photo.height - height + 1)
        view = photo.crop((left, top, left + width, top + height)).resize((1024, 768),
                                                                          Image.BICUBIC)
        if rng.rand() < 0.5:
            view = view.transpose(Image.FLIP_LEFT_RIGHT)
        shifted = np.asarray(view, np.float32) * rng.uniform(0.8, 1.2, 3)
        folder = os.path.join(root, f"class{i % classes}")
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(shifted.clip(0, 255).astype(np.uint8)).save(
            os.path.join(folder, f"{i:05d}.jpg"), quality=90)


def train_run(data: str, run: str, model: str, *flags: str) -> None:
    command = [sys.executable, "-m", "tfyard", "train", "--model", model, "--dataset",
               "imagefolder", "--data_dir", data, "--output_dir", run, "--train_steps", "1",
               "--batch_size", "4", "--num_gpus", "0", "--quiet", *flags]
    subprocess.run(command, check=True)


def timed(command: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def agreement(run: str, data: str) -> dict:
    """Evaluate's top-1 on the held-out images, predict's on the same files, and the
    top-1 classes a full-size decode (no JPEG scale) would change."""
    import numpy as np
    import tensorflow as tf

    from tfyard.data.formats.folder import listing
    from tfyard.data.preprocess import JPEG_RATIOS, eval_image, jpeg_scale
    from tfyard.predict import predict
    from tfyard.predict.local import locate
    from tfyard.predict.predictor import Predictor
    from tfyard.train.evaluate import evaluate_output

    files = listing(data, "validation")[1]
    rows = predict(run, [path for path, _ in files], top_k=1)
    predicted = sum(row["class_id"] == label for row, (_, label) in zip(rows, files,
                                                                        strict=True))
    predictor = Predictor(locate(run), top_k=1)
    changed = 0
    for row, (path, _) in zip(rows, files, strict=True):
        full = eval_image(tf.io.decode_jpeg(tf.io.read_file(path)), predictor.view)
        changed += int(np.argmax(predictor.model.serve(full[None])["probabilities"])) \
            != row["class_id"]
    shape = tf.io.extract_jpeg_shape(tf.io.read_file(files[0][0])).numpy()
    scale = JPEG_RATIOS[int(jpeg_scale(shape, predictor.view)[0])]
    return {"images": len(files), "evaluate_top1": evaluate_output(run)["top1"],
            "predict_top1": predicted / len(files), "changed_by_full_decode": changed,
            "jpeg_scale": f"1/{scale} of {shape[1]}x{shape[0]}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default="mobilenet_v1_025")
    parser.add_argument("--work", help="reuse this directory (default: a temporary one)")
    args = parser.parse_args()
    from tfyard.data.formats.base import IMAGENET_STATS

    work = args.work or tempfile.mkdtemp(prefix="predict-bench-")
    data, run = os.path.join(work, "photos"), os.path.join(work, "run")
    if not os.path.isdir(data):
        write_photos(data, args.images)
    if not os.path.isdir(os.path.join(run, "export")):
        train_run(data, run, args.model)
    script = os.path.join(work, "keras_predict.py")
    with open(script, "w") as stream:
        stream.write(KERAS_SCRIPT.format(mean=list(IMAGENET_STATS[0]),
                                         std=list(IMAGENET_STATS[1])))
    sides = {
        "tfyard": [sys.executable, "-m", "tfyard", "predict", "--output_dir", run, data,
                   "--output", os.path.join(work, "tfyard.csv")],
        "keras": [sys.executable, script, data, os.path.join(run, "export", "model.keras"),
                  os.path.join(work, "keras.csv")],
    }
    times = {side: [] for side in sides}
    for round_number in range(args.rounds):
        order = list(sides)[round_number % 2:] + list(sides)[:round_number % 2]
        for side in order:
            times[side].append(timed(sides[side]))
            print(f"round {round_number + 1} {side}: {times[side][-1]:.1f}s", flush=True)
    with open(os.path.join(work, "tfyard.csv")) as stream:
        assert sum(1 for _ in csv.reader(stream)) == args.images + 1
    ratios = [k / t for k, t in zip(times["keras"], times["tfyard"], strict=True)]
    result = {"images": args.images, "model": args.model,
              **{f"{side}_seconds": [round(t, 1) for t in ts] for side, ts in times.items()},
              **{f"{side}_images_per_sec": round(args.images / statistics.median(ts), 1)
                 for side, ts in times.items()},
              "keras_over_tfyard": round(statistics.median(ratios), 2),
              "agreement": agreement(run, data)}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
