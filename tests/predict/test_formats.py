"""Every format and colour mode, and photos of many megapixels, through the one eval view."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import tfyard
from tests.predict.conftest import encoded, photo
from tfyard.data.formats.base import IMAGENET_EVAL
from tfyard.data.preprocess import eval_image

VIEW = IMAGENET_EVAL.resized(16)


def _variants():
    image = photo("green", 3)
    frames = [image.convert("P"), photo("red", 4).convert("P")]
    return {
        "jpeg": encoded(image), "jpeg-grey": encoded(image.convert("L")),
        "jpeg-cmyk": encoded(image.convert("CMYK")), "png": encoded(image, "PNG"),
        "png-grey": encoded(image.convert("L"), "PNG"),
        "png-grey-alpha": encoded(image.convert("LA"), "PNG"),
        "png-rgba": encoded(image.convert("RGBA"), "PNG"),
        "png-palette": encoded(image.convert("P"), "PNG"), "bmp": encoded(image, "BMP"),
        "gif-animated": encoded(frames[0], "GIF", save_all=True, append_images=frames[1:]),
    }


def test_every_format_and_colour_mode_is_predicted(run, tmp_path):
    variants = _variants()
    for name, data in variants.items():
        (tmp_path / f"{name}.{name.split('-')[0].replace('jpeg', 'jpg')}").write_bytes(data)
    rows = tfyard.predict(run, [tmp_path], top_k=3)
    assert len(rows) == len(variants) and not [r["error"] for r in rows if r["error"]]
    by_name = {r["path"].rsplit("/", 1)[1].split(".")[0]: r for r in rows}
    png, rgba, bmp = (by_name[n]["top_scores"] for n in ("png", "png-rgba", "bmp"))
    assert png == pytest.approx(rgba, abs=1e-6) and png == pytest.approx(bmp, abs=1e-6)


def _gradient() -> Image.Image:
    """A smooth picture: JPEG keeps it within a level or two, unlike noise."""
    y, x = np.mgrid[0:96, 0:128]
    return Image.fromarray(np.stack([x * 2, y * 2, x + y], -1).clip(0, 255).astype(np.uint8))


@pytest.mark.parametrize("mode", ["L", "LA", "RGBA", "CMYK", "P"])
def test_colour_modes_become_the_models_channels(mode):
    image = _gradient()
    fmt = "JPEG" if mode in ("L", "CMYK") else "PNG"
    ours = eval_image(tf.constant(encoded(image.convert(mode), fmt, quality=95)), VIEW)
    reference = eval_image(tf.constant(encoded(image.convert(mode).convert("RGB"), "PNG")),
                           VIEW)
    assert ours.shape == (16, 16, 3)
    assert float(tf.reduce_mean(tf.abs(ours - reference))) < 0.1   # ~6 of 255 on JPEG noise
    grey = eval_image(tf.constant(encoded(image.convert(mode), fmt)),
                      IMAGENET_EVAL.__class__(16, 1, (33.3,), (78.6,)))
    assert grey.shape == (16, 16, 1)


def test_a_12_megapixel_jpeg_decodes_at_an_eighth_and_matches_the_full_decode():
    rng = np.random.RandomState(0)
    smooth = tf.image.resize(rng.rand(30, 40, 3) * 255, [3000, 4000]).numpy()
    data = encoded(Image.fromarray(smooth.astype(np.uint8)), quality=90)
    fast = eval_image(tf.constant(data), VIEW)
    full = eval_image(tf.io.decode_jpeg(data), VIEW)   # pixels: no scaled decode
    assert fast.shape == (16, 16, 3)
    assert float(tf.reduce_mean(tf.abs(fast - full))) < 0.05


def test_a_large_photo_is_predicted(run, tmp_path):
    photo("red", 9, size=(4000, 3000)).save(tmp_path / "big.jpg", quality=85)
    row, = tfyard.predict(run / "export" / "saved_model", tmp_path / "big.jpg")
    assert row["error"] == "" and row["class_name"] in ("blue", "green", "red")
