"""The store a bucket URL's scheme names, made on first use, one a process for each set of
its settings; only then is its client library (the `cloud` extra) imported."""

from __future__ import annotations

import os

from tfyard.storage.store import Store

# The environment a store reads its settings from (credentials, region, endpoint, tfyard's
# timeouts): what a process reaching a bucket as this one does must inherit (predict's engine
# workers).
SETTINGS = ("AWS_", "GOOGLE_", "STORAGE_EMULATOR_HOST", "CLOUDSDK_", "TFYARD_STORE_")


def of(scheme: str) -> Store:
    """The store for `scheme` ("s3" or "gs") with the process's current settings."""
    if scheme == "s3":
        from tfyard.storage.s3 import S3Store as kind
    else:
        from tfyard.storage.gcs import GcsStore as kind
    settings = (scheme, *sorted((name, value) for name, value in os.environ.items()
                                if name.startswith(SETTINGS)))
    if settings not in _stores:
        _stores[settings] = kind()
    return _stores[settings]


_stores: dict[tuple, Store] = {}


def settings() -> tuple[tuple[str, str], ...]:
    """This process's store settings, to hand to a process that must reach the same buckets
    (secrets among them: never print them)."""
    return tuple((name, value) for name, value in os.environ.items()
                 if name.startswith(SETTINGS))
