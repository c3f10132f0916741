"""A wheel of the running tfyard, made offline with zipfile.

tfyard is not on PyPI, and `pip wheel` needs build tools (and usually the network), so the
image gets the installed package's own files plus its installed metadata. The archive is
byte-for-byte reproducible, so Docker's layer cache survives repeated packs.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

import tfyard
from tfyard.errors import UserError
from tfyard.replace import replacing_file

_EPOCH = (1980, 1, 1, 0, 0, 0)


def wheel_name() -> str:
    return f"tfyard-{tfyard.__version__}-py3-none-any.whl"


def build_wheel(dest: Path) -> Path:
    """Write tfyard's wheel into `dest` and return its path."""
    try:
        dist = importlib.metadata.distribution("tfyard")
    except importlib.metadata.PackageNotFoundError:
        raise UserError("tfyard is not installed as a package, so it cannot be put into the "
                        "image; run `pip install -e .` in the tfyard checkout") from None
    package = Path(tfyard.__file__).parent
    info = f"tfyard-{tfyard.__version__}.dist-info"
    files = {
        f"tfyard/{path.relative_to(package).as_posix()}": path.read_bytes()
        for path in sorted(package.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
    }
    files[f"{info}/METADATA"] = dist.read_text("METADATA").encode()
    files[f"{info}/entry_points.txt"] = (dist.read_text("entry_points.txt") or "").encode()
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: tfyard-pack\n"
                              b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    path = dest / wheel_name()
    with replacing_file(str(path), "wb") as stream, \
            zipfile.ZipFile(stream, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            entry = zipfile.ZipInfo(name, _EPOCH)
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data, zipfile.ZIP_DEFLATED)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
