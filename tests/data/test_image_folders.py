"""Image folders are read as Keras's `image_dataset_from_directory` reads them: the same files
per class (sub-folders, any-case extensions, BMP and GIF), by training, inspect and convert."""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import pytest

from tests.data.helpers import collect, coloured, image_bytes
from tfyard.cli import main
from tfyard.data import build_dataset, dataset_info
from tfyard.data.formats.folder import list_images
from tfyard.errors import UserError


def write(path, label: int, fmt: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as stream:
        stream.write(image_bytes(coloured(label, 12, 14), fmt))


def tricky_tree(root) -> None:
    """Nested class folders, mixed-case extensions, BMP- and GIF-only classes, non-images,
    a symlinked folder inside a class (not followed) and a symlinked class folder."""
    write(f"{root}/ant/sub0/1.jpg", 0, "JPEG")
    write(f"{root}/ant/sub0/2.JPG", 0, "JPEG")
    write(f"{root}/ant/sub1/deeper/3.Jpeg", 0, "JPEG")
    with open(f"{root}/ant/notes.txt", "w") as stream:
        stream.write("not an image")
    write(f"{root}/bee/1.png", 1, "PNG")
    write(f"{root}/bee/2.PNG", 1, "PNG")
    os.symlink(f"{root}/ant/sub0", f"{root}/bee/linked")
    write(f"{root}/cat/1.bmp", 2, "BMP")
    write(f"{root}/cat/x/2.BMP", 2, "BMP")
    write(f"{root}/dog/1.gif", 3, "GIF")
    write(f"{root}/dog/y/2.GIF", 3, "GIF")
    os.symlink(f"{root}/bee", f"{root}/eel")


def by_class(paths, labels, names, root) -> dict[str, list[str]]:
    files: dict[str, list[str]] = {name: [] for name in names}
    for path, label in zip(paths, labels, strict=True):
        files[names[int(label)]].append(os.path.relpath(path, root))
    return {name: sorted(found) for name, found in files.items()}


def keras_reads(root) -> dict[str, list[str]]:
    import keras

    dataset = keras.utils.image_dataset_from_directory(
        str(root), batch_size=None, image_size=(8, 8), shuffle=False, verbose=False)
    labels = [int(y) for _, y in dataset]
    return by_class(dataset.file_paths, labels, dataset.class_names, root)


@pytest.fixture(scope="module")
def tricky(tmp_path_factory):
    root = tmp_path_factory.mktemp("tricky")
    for split in ("train", "validation"):
        tricky_tree(root / split)
    return root


def test_the_files_of_each_class_are_those_keras_reads(tricky):
    train = tricky / "train"
    expected = keras_reads(train)
    assert expected["ant"] == ["ant/sub0/1.jpg", "ant/sub0/2.JPG", "ant/sub1/deeper/3.Jpeg"]
    assert expected["cat"] == ["cat/1.bmp", "cat/x/2.BMP"] and len(expected) == 5
    names, files = list_images(str(train))
    assert by_class(*zip(*files, strict=True), names, train) == expected


def test_training_reads_every_class_bmp_and_gif_included(tricky):
    info = dataset_info("imagefolder", str(tricky))
    assert info.class_names == ("ant", "bee", "cat", "dog", "eel")
    assert info.num_examples == {"train": 11, "validation": 11}
    expected = Counter({label: len(files) for label, files in
                        enumerate(keras_reads(tricky / "train").values())})
    for split in ("train", "validation"):   # the training view decodes BMP and GIF too
        images, labels = collect(build_dataset("imagefolder", split, str(tricky), batch_size=1,
                                               image_size=8, repeat=False))
        assert Counter(labels.tolist()) == expected and images.shape[1:] == (8, 8, 3)
        assert np.isfinite(images).all()


def test_inspect_counts_every_class(tricky, capsys):
    assert main(["data", "inspect", str(tricky), "--verify"]) == 0
    assert "train: 11 records, 5 classes" in capsys.readouterr().out


def test_dot_files_and_dot_folders_are_never_images(tmp_path):
    write(f"{tmp_path}/ant/1.jpg", 0, "JPEG")
    write(f"{tmp_path}/ant/._1.jpg", 0, "JPEG")
    write(f"{tmp_path}/ant/.ipynb_checkpoints/2.jpg", 0, "JPEG")
    write(f"{tmp_path}/.hidden/3.jpg", 0, "JPEG")
    names, files = list_images(str(tmp_path))
    assert names == ["ant"] and files == [(f"{tmp_path}/ant/1.jpg", 0)]


def test_a_class_without_images_is_refused_by_name(tmp_path, capsys):
    write(f"{tmp_path}/ant/a/1.jpg", 0, "JPEG")
    os.makedirs(f"{tmp_path}/bee/empty")
    (tmp_path / "bee" / "readme.txt").write_text("no images here")
    with pytest.raises(UserError, match=r"class 'bee' \(.*/bee\) holds no image "
                                        r"\(.bmp .gif .jpeg .jpg .png, sub-folders included\)"):
        dataset_info("imagefolder", str(tmp_path))
    assert main(["data", "inspect", str(tmp_path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_splits_with_other_classes_are_refused(tmp_path):
    for name in ("ant", "bee", "cat"):
        write(f"{tmp_path}/train/{name}/1.jpg", 0, "JPEG")
    for name in ("ant", "bee", "dog"):
        write(f"{tmp_path}/validation/{name}/1.jpg", 0, "JPEG")
    with pytest.raises(UserError, match=r"the classes of .*/validation differ from the "
                                        r"training folder's: it lacks cat; it has dog besides"):
        dataset_info("imagefolder", str(tmp_path))
