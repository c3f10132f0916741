"""What the served model takes, without TensorFlow: image bytes raw or as base64 text; a path
or URL string is refused unread; an image too large is refused from its header, before any
decode."""

from __future__ import annotations

import base64
import io
import struct
import zlib

import pytest
from PIL import Image

from tfyard.tracking.images import MAX_BYTES, MAX_PIXELS, image_bytes


def png(width: int, height: int) -> bytes:
    return encoded(Image.new("RGB", (width, height)), "PNG")


def encoded(image: Image.Image, fmt: str) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt)
    return out.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG of 57 bytes whose header claims width x height pixels (a decompression bomb's
    shape: the header is all a check may read)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                               0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "GIF", "BMP", "WEBP"])
def test_image_bytes_raw_or_base64_are_taken_as_they_are(fmt):
    image = encoded(Image.new("RGB", (20, 10), (200, 30, 30)), fmt)
    text = base64.b64encode(image).decode()
    assert image_bytes(image) == (image, None)
    assert image_bytes(bytearray(image)) == (image, None)
    assert image_bytes(text) == (image, None)
    assert image_bytes(base64.encodebytes(image).decode()) == (image, None)   # lines
    assert image_bytes(base64.urlsafe_b64encode(image).decode()) == (image, None)
    assert image_bytes(text.encode()) == (image, None)   # as MLflow's REST input hands it


@pytest.mark.parametrize("address", [
    "/etc/hostname", "/etc/passwd1", "cat.jpg", "./cat.jpg", "~/cat.jpg", "C:\\cat.jpg",
    "s3://bucket/cat.jpg", "gs://bucket/cat.jpg", "hdfs://namenode/cat.jpg",
    "file:///etc/passwd", "https://example.com/cat.jpg"])
def test_a_path_or_url_is_refused_never_opened(address, tmp_path):
    data, problem = image_bytes(address)
    assert data is None
    assert problem.startswith(("a path or URL is never opened; send the image's bytes",
                               "not base64 image bytes; send the image's bytes")), problem
    image = tmp_path / "cat.jpg"   # even one that is an image
    image.write_bytes(png(4, 4))
    assert image_bytes(str(image)) == (None, "a path or URL is never opened; send the image's "
                                             "bytes (base64 text in JSON)")
    assert image_bytes(str(image).encode())[0] is None


def test_an_image_too_large_is_refused_before_it_is_decoded():
    side = int(MAX_PIXELS ** 0.5)
    assert image_bytes(png_header(side, side))[0] is not None   # at the bound: taken
    for width, height in ((side + 1, side), (100_000, 100_000), (2**31 - 1, 2**31 - 1)):
        data, problem = image_bytes(png_header(width, height))
        assert data is None and problem.startswith("too large: ") and \
            "checked before decoding" in problem, problem
    data, problem = image_bytes(b"\xff\xd8\xff" + bytes(MAX_BYTES))
    assert data is None and problem == (f"too large: {MAX_BYTES + 3} bytes (the bound is "
                                        f"{MAX_BYTES} bytes)")


@pytest.mark.parametrize(("item", "problem"), [
    (None, "no image (the cell is null)"),
    (float("nan"), "no image (the cell is null)"),
    (b"", "cannot decode: it is empty (0 bytes)"),
    (b"\x00\x01 not an image", "cannot decode: not an image (JPEG, PNG, GIF, BMP or WebP "
                               "bytes)"),
    (base64.b64encode(b"plain text").decode(), "not base64 image bytes; send the image's "
                                               "bytes (base64 text in JSON)"),
    (7, "not an image: a int; send the image's bytes (base64 text in JSON)"),
])
def test_anything_else_is_refused_with_its_reason(item, problem):
    assert image_bytes(item) == (None, problem)
