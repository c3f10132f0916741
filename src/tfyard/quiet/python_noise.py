"""The Python log records and warnings that tfyard's own doings cause in TensorFlow, Keras
and Ray, dropped: what the fd 2 filter cannot see, as it goes through Python's `logging` and
`warnings`, and what `tfyard.fit` drops in a user's process, where fd 2 is left alone.
"""

from __future__ import annotations

import logging
import re
import warnings

# Python log records that are TensorFlow/Keras noise to a tfyard user, caused by what tfyard
# itself does: (logger, a pattern matched at the start of the message).
PYTHON_NOISE = (
    # Keras calling the model.h5 that tfyard writes "legacy".
    ("absl", r"You are saving your model as an HDF5 file"),
    # A parameter-server chief's checkpoint save: TensorFlow's MultiDeviceSaver wraps every
    # save across tasks in a new tf.function, on purpose (its source: "the retrace is needed
    # to ensure we pickup the latest values of options"), so the 5th save warns of
    # retracing (4 lines of ~600 characters). Nothing the user can change; it costs ~0.12 s
    # a save for ResNet-8 on 2 cores (see docs/architecture.md).
    ("tensorflow", r"\d+ out of the last \d+ calls to <function MultiDeviceSaver\.save\."),
    # The local Ray that `launch ray` / `predict --on ray` start turns token authentication
    # on and says so; a Ray without it still warns.
    ("ray._private.authentication.authentication_token_setup",
     r"Token authentication is enabled for this Ray cluster"),
)
# Python warnings of the same kind: (category, a pattern matched at the start of the text).
PYTHON_WARNINGS = (
    # --seed under parameter-server training: the per-worker input is traced inside the
    # coordinator's function, whose graph seed its augmentations then use. Harmless: a PS
    # run's input order is not seeded anyway (docs/faults.md, "Exact resume").
    (UserWarning, r"Seed \d+ from outer graph might be getting used by function Dataset_"),
)


def drop_python_noise() -> None:
    """Drop the Python log records and warnings tfyard itself causes (PYTHON_NOISE,
    PYTHON_WARNINGS), once per logger; also where TensorFlow's own lines are left alone
    (`tfyard.fit` in the user's process)."""
    for logger, start in PYTHON_NOISE:
        filters = logging.getLogger(logger).filters
        if not any(isinstance(f, _DropMessage) and f.start == start for f in filters):
            logging.getLogger(logger).addFilter(_DropMessage(start))
    for category, start in PYTHON_WARNINGS:
        warnings.filterwarnings("ignore", message=start, category=category)


class _DropMessage(logging.Filter):
    def __init__(self, start: str):
        super().__init__()
        self.start = start

    def filter(self, record: logging.LogRecord) -> bool:
        return not re.match(self.start, record.getMessage())
