"""What the served model takes: an image's encoded bytes, raw or as base64 text, and
nothing else. A string is never a path or a URL, so a request can make the serving host open
none of its files or reach no other address; and an image is measured before it is decoded,
so a small file that decodes into gigabytes (a decompression bomb) is refused unread.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import warnings

from tfyard.storage.location import scheme_of

MAX_BYTES = 32 * 2**20        # an encoded image's size
MAX_PIXELS = 8192 * 8192      # width x height as its header gives them
NOT_IMAGE = "cannot decode: not an image (JPEG, PNG, GIF, BMP or WebP bytes)"
SEND = "send the image's bytes (base64 text in JSON)"


def image_bytes(item) -> tuple[bytes | None, str | None]:
    """(the encoded image, None), or (None, why `item` is refused). Bytes are an image's, or
    the base64 text of one (MLflow's REST input hands strings over as their UTF-8 bytes);
    a string is base64 text."""
    if item is None or (isinstance(item, float) and math.isnan(item)):
        return None, "no image (the cell is null)"
    if isinstance(item, bytes | bytearray | memoryview):
        data = bytes(item)
        problem = refusal(data)
        text = data.decode() if problem == NOT_IMAGE and data.isascii() else ""
        if not (_base64(text) or _addressed(text)):
            return (None, problem) if problem else (data, None)
        item = text   # a string that MLflow's REST input turned into bytes
    if not isinstance(item, str):
        return None, f"not an image: a {type(item).__name__}; {SEND}"
    data = _base64(item)
    problem = None if data is None else refusal(data)
    if data is None or problem == NOT_IMAGE:
        return None, (f"a path or URL is never opened; {SEND}" if _addressed(item)
                      else f"not base64 image bytes; {SEND}")
    return (None, problem) if problem else (data, None)


def refusal(data: bytes) -> str | None:
    """Why `data` is no image to decode (empty, over MAX_BYTES, not an image, or over
    MAX_PIXELS by its header), or None; nothing is decoded."""
    from PIL import Image

    if not data:
        return "cannot decode: it is empty (0 bytes)"
    if len(data) > MAX_BYTES:
        return f"too large: {len(data)} bytes (the bound is {MAX_BYTES} bytes)"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as image:   # reads the header only
                width, height = image.size
        except Image.DecompressionBombError:   # past Pillow's own bound, far past ours
            return f"too large: more than {MAX_PIXELS} pixels (checked before decoding)"
        except Exception:  # noqa: BLE001 - Pillow says "not an image" in many ways
            return NOT_IMAGE
    if width * height > MAX_PIXELS:
        return (f"too large: {width}x{height} pixels (the bound is {MAX_PIXELS} pixels, "
                "checked before decoding)")
    return None


def _base64(text: str) -> bytes | None:
    """The bytes `text` holds in base64 (standard or URL-safe, lines allowed), or None."""
    packed = "".join(text.split())
    for alphabet in (None, b"-_"):
        try:
            return base64.b64decode(packed, altchars=alphabet, validate=True)
        except (binascii.Error, ValueError):
            continue
    return None


def _addressed(text: str) -> bool:
    """Whether `text` reads as a path or a URL (s3://, gs://, hdfs://, file:, /etc/...)."""
    return scheme_of(text) is not None or text.startswith(("/", "~", ".", "file:")) \
        or "\\" in text
