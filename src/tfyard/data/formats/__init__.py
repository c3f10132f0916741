"""One reader per on-disk format, each a module that implements `Format`, and their registry.

`scan(name, data_dir, split, decode)` yields one `Record` per stored example, for
`tfyard data inspect` and for naming the bad record when training hits one. Readers import
`base` (shared facts and checks), never this registry nor `tfyard.data`, and load on first
use, so importing the registry imports no reader and no TensorFlow.
"""

from __future__ import annotations

import difflib
import functools
import importlib
from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from tfyard.data.formats.base import DatasetInfo, Record
from tfyard.errors import UserError

__all__ = ["ALIASES", "DATASETS", "REGISTRY", "DatasetInfo", "Format", "Record", "canonical",
           "held", "known", "reader", "streamed"]

# dataset name -> the module in this package that reads it; one key per dataset format
REGISTRY = {
    "imagenet": "tfrecord",
    "tfrecord": "tfrecord",
    "cifar10": "cifar",
    "cifar100": "cifar",
    "mnist": "mnist",
    "imagefolder": "folder",
    "digits": "digits",
    "synthetic": "synthetic",   # random batches shaped like ImageNet, or like the dataset
    "synthetic_cifar10": "synthetic",   # after the underscore (benchmarks: no input cost)
    "synthetic_cifar100": "synthetic",
    "synthetic_mnist": "synthetic",
}
DATASETS: tuple[str, ...] = tuple(REGISTRY)
# Older spellings, accepted everywhere and recorded as the canonical name.
ALIASES = {"folder": "imagefolder"}


def canonical(name: str) -> str:
    """The one name of a dataset format (`folder` is `imagefolder`)."""
    return ALIASES.get(name, name)


@runtime_checkable
class Format(Protocol):
    """What every reader module offers; `name` is the registry key it was found under."""

    def info(self, name: str, data_dir: str | None, cache_dir: str | None = None,
             **options: Any) -> DatasetInfo: ...

    def build(self, name: str, data_dir: str | None, spec: Any) -> Any:
        """Batches of (image, label) as `tfyard.data.build_dataset` documents."""

    def scan(self, name: str, data_dir: str | None, split: str, decode: bool = False,
             **options: Any) -> Iterator[Record]: ...


def known(name: str) -> str:
    """The canonical name of dataset `name`, or a UserError listing the known names; imports
    nothing, so a mistyped name answers before TensorFlow loads."""
    name = canonical(name)
    if name not in REGISTRY:
        close = difflib.get_close_matches(name, DATASETS, n=len(DATASETS), cutoff=0.3)
        names = close + [n for n in DATASETS if n not in close]
        raise UserError(f"unknown dataset {name!r}; use one of: {', '.join(names)}")
    return name


def reader(name: str) -> Format:
    """The format for dataset `name`, or a UserError listing the known names."""
    module = importlib.import_module(f"{__name__}.{REGISTRY[known(name)]}")
    assert isinstance(module, Format), f"{module.__name__} does not implement Format"
    return module


def streamed(name: str):
    """Which objects of a `name` set in a bucket its readers may open one at a time, through
    the bounded cache (`storage.stream`): a test of an object's name; None for a format
    read whole (CIFAR, MNIST: a few files)."""
    test = getattr(reader(name), "streams", None)
    return None if test is None else functools.partial(test, canonical(name))


def held(name: str):
    """What the readers of a streamed `name` set hold open at once (`Streaming.held`); None
    where a format reads one file at a time, briefly (an image folder's images)."""
    count = getattr(reader(name), "held", None)
    return None if count is None else functools.partial(count, canonical(name))
