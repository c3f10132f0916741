"""One tiny trained run for every prediction test: ResNet-8 at 16 px on an image folder of
128x96 JPEGs (so the JPEG decode at 1/4 scale is exercised), trained in-process once."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.storage.conftest import gcs, gcs_endpoint, s3, s3_endpoint  # noqa: F401 - stores

COLOURS = {"blue": (30, 30, 200), "green": (30, 200, 30), "red": (200, 30, 30)}
SIZE = (128, 96)   # width, height


def photo(label: str, seed: int, size=SIZE) -> Image.Image:
    """A noisy image of the class's colour."""
    rng = np.random.RandomState(seed)
    pixels = np.array(COLOURS[label]) + rng.randint(-60, 60, (size[1], size[0], 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def encoded(image: Image.Image, fmt: str = "JPEG", **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


@pytest.fixture(scope="session")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("photos")
    for split, count in (("train", 12), ("validation", 8)):
        for number, label in enumerate(COLOURS):
            os.makedirs(root / split / label)
            for i in range(count):
                photo(label, 1000 * number + 100 * (split == "train") + i).save(
                    root / split / label / f"{i}.jpg", quality=90)
    return root


@pytest.fixture(scope="session")
def run(folder, tmp_path_factory) -> Path:
    import tfyard

    output = tmp_path_factory.mktemp("run")
    tfyard.fit("cifar_resnet8", "imagefolder", data_dir=str(folder), output_dir=str(output),
               image_size=16, batch_size=8, train_steps=6, steps_per_loop=3, seed=1,
               num_gpus="0", jit_compile=False, quiet=True)
    return output


@pytest.fixture(scope="session")
def few(folder, tmp_path_factory) -> Path:
    """Eight validation images (one named `.JpG`) and one broken file, for the Spark and
    Ray tests."""
    root = tmp_path_factory.mktemp("few")
    for label in COLOURS:
        for i in range(2 + (label == "red")):
            (root / f"{label}{i}.jpg").write_bytes((folder / "validation" / label /
                                                     f"{i}.jpg").read_bytes())
    (root / "broken.jpg").write_bytes(b"not a jpeg")
    (root / "upper.JpG").write_bytes((folder / "validation" / "red" / "5.jpg").read_bytes())
    return root


@pytest.fixture(scope="session")
def local_classes(run, few) -> dict:
    """File name -> class name (None when unreadable), as a local `tfyard predict` says."""
    import tfyard

    return {Path(row["path"]).name: row["class_name"] for row in tfyard.predict(run, [few])}


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, so predict draws its progress bar into it."""

    def isatty(self) -> bool:
        return True


def same_as_local(rows, local_classes: dict) -> None:
    """One row per file, no duplicates, every class as local predict's, the broken file's
    error in its row."""
    names = [Path(str(row["path"]).removeprefix("file:")).name for row in rows]
    assert sorted(names) == sorted(local_classes)
    assert {name: row["class_name"] for name, row in zip(names, rows, strict=True)} \
        == local_classes
    errors = {name for name, row in zip(names, rows, strict=True) if row["error"]}
    assert errors == {"broken.jpg"}


@pytest.fixture(scope="session")
def edges(folder, tmp_path_factory) -> Path:
    """One tree of every edge an input set has: nested folders, mixed-case extensions, an
    empty file, a text file named .png, a 16-bit PNG, a CMYK and an EXIF-rotated JPEG, a
    symlinked file (listed) and folder (not followed), dot-files and a non-image (never)."""
    root = tmp_path_factory.mktemp("edges")
    (root / "a" / "Nested" / "deep").mkdir(parents=True)
    (root / "b").mkdir()
    (root / ".cache").mkdir()
    jpeg = (folder / "validation" / "red" / "0.jpg").read_bytes()
    (root / "a" / "Nested" / "deep" / "red.JPG").write_bytes(jpeg)
    (root / "a" / "green.JpEg").write_bytes(
        (folder / "validation" / "green" / "0.jpg").read_bytes())
    deep = np.linspace(0, 65535, 96 * 128).reshape(96, 128).astype(np.uint16)
    Image.fromarray(deep).save(root / "a" / "sixteen.PNG")   # mode I;16
    photo("blue", 5).convert("CMYK").save(root / "b" / "cmyk.jpeg")
    exif = Image.Exif()
    exif[0x0112] = 6   # rotated 90 degrees
    photo("red", 6).save(root / "b" / "rotated.jpg", exif=exif)
    (root / "b" / "empty.jpg").write_bytes(b"")
    (root / "b" / "text.png").write_text("not an image")
    (root / "b" / ".hidden.jpg").write_bytes(jpeg)
    (root / ".cache" / "x.jpg").write_bytes(jpeg)
    (root / "notes.txt").write_text("not an image name")
    (root / "link.jpg").symlink_to(root / "a" / "green.JpEg")
    (root / "linked").symlink_to(root / "b", target_is_directory=True)
    return root


EDGE_FILES = ["link.jpg", "a/green.JpEg", "a/sixteen.PNG", "a/Nested/deep/red.JPG",
              "b/cmyk.jpeg", "b/empty.jpg", "b/rotated.jpg", "b/text.png"]


def edge_items(edges: Path) -> list:
    """The edge tree's images, a path that vanished and a null cell: what the engines'
    Python forms are handed as a column of paths."""
    gone = edges / "gone.jpg"
    gone.write_bytes(b"")
    gone.unlink()
    return [str(edges / name) for name in EDGE_FILES] + [str(gone), None]


def summary(rows) -> list[tuple]:
    """(path, class, error) of each row, sorted: what every engine and format must agree
    on (csv's empty cells read as None, as the other formats' nulls)."""
    return sorted(((row["path"], row["class_name"] or None, row["error"] or "")
                   for row in rows), key=lambda r: (r[0] is None, r[0] or ""))


def read_rows(output: Path, fmt: str) -> list[dict]:
    """The rows of a table a predict wrote: a file, or an engine's folder of part files."""
    import csv
    import json

    import pyarrow.parquet as pq

    files = sorted(p for p in output.iterdir() if p.name[0] not in "._") \
        if output.is_dir() else [output]
    rows = []
    for part in files:
        if fmt == "parquet":
            rows += pq.read_table(part).to_pylist()
        elif fmt == "jsonl":
            rows += [json.loads(line) for line in part.read_text().splitlines() if line]
        else:
            with open(part, newline="") as stream:
                rows += list(csv.DictReader(stream))
    return rows


@pytest.fixture(scope="session")
def edge_rows(run, edges) -> list[tuple]:
    """The summary of local predict's rows for the edge items."""
    import tfyard

    return summary(tfyard.predict(run, edge_items(edges)))


@pytest.fixture(scope="session")
def old_export(tmp_path_factory) -> Path:
    """A SavedModel with no `metadata` signature, as a tfyard before prediction exported."""
    import tensorflow as tf

    model = tmp_path_factory.mktemp("old") / "saved_model"
    tf.saved_model.save(tf.Module(), str(model))
    return model


def listed(summary_rows: list[tuple]) -> list[tuple]:
    """The summary rows of the edge tree's files alone (no vanished file, no null cell)."""
    return [row for row in summary_rows if row[0] and not row[0].endswith("gone.jpg")]
