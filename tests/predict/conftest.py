"""One tiny trained run for every prediction test: ResNet-8 at 16 px on an image folder of
128x96 JPEGs (so the JPEG decode at 1/4 scale is exercised), trained in-process once."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

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
