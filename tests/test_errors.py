"""Disk failures in the OS's own words: `errors.disk_reason` and `errors.disk_error`."""

from __future__ import annotations

import errno
import os

import pytest
import tensorflow as tf

from tfyard.errors import UserError, disk_error, disk_reason

DISK = [errno.ENOSPC, errno.EACCES, errno.EROFS, errno.EDQUOT]
WORDS = {errno.ENOSPC: "No space left on device", errno.EACCES: "Permission denied",
         errno.EROFS: "Read-only file system", errno.EDQUOT: "Disk quota exceeded"}


def op_error(code: int) -> tf.errors.OpError:
    """What a failed SaveV2 raises: the OS words wrapped in TensorFlow's op text."""
    return tf.errors.UnknownError(
        None, None, "{{function_node __wrapped__SaveV2_dtypes_1_device_/job:localhost/replica:0"
        "/task:0/device:CPU:0}} /run/checkpoints/ckpt-20_temp/part-00000-of-00001.data-00000-"
        f"of-00001.tempstate123; {os.strerror(code)} [Op:SaveV2] name: ")


@pytest.mark.parametrize("code", DISK, ids=errno.errorcode.get)
@pytest.mark.parametrize("raised", ["oserror", "op_error"])
def test_a_disk_failure_is_the_os_reason_without_op_text(code, raised):
    exc = OSError(code, os.strerror(code), "/run/summary.json.tmp-1") if raised == "oserror" \
        else op_error(code)
    assert disk_reason(exc) == WORDS[code]
    error = disk_error(exc, "write checkpoint at step 20")
    assert isinstance(error, UserError)
    message = str(error)
    assert message.startswith(f"cannot write checkpoint at step 20 ({WORDS[code]}); ")
    assert "rerun to resume" in message and "\n" not in message
    for op_text in ("{{", "function_node", "SaveV2", "[Op:", "tempstate", "/run/"):
        assert op_text not in message


def test_an_errno_alone_is_enough_and_other_failures_are_not_disk_failures():
    assert disk_reason(PermissionError(errno.EACCES, "")) == "Permission denied"
    for exc in (FileNotFoundError(errno.ENOENT, "No such file or directory", "/x"),
                tf.errors.NotFoundError(None, None, "/x; No such file or directory"),
                ValueError("shapes (3,) and (4,) do not match")):
        assert disk_reason(exc) is None and disk_error(exc, "write /x") is None
