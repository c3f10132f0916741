"""The registry as plain data: names, specs, aliases and errors, without TensorFlow."""

from __future__ import annotations

import pytest

from tests.conftest import python_prints
from tfyard.errors import UserError
from tfyard.models import MODELS, ModelSpec, get_spec, min_input_size, model_names, resolve_alias

FAMILY_SHAPES = {"imagenet": (224, 224, 3), "cifar": (32, 32, 3), "mnist": (28, 28, 1)}


def test_registry_holds_every_family_with_its_default_input():
    assert model_names() == list(MODELS)
    assert {f"resnet{d}" for d in (18, 34, 50, 101, 152, 200)} <= set(MODELS)
    assert {f"cifar_resnet{d}" for d in (20, 32, 44, 56, 110)} <= set(MODELS)
    assert {"mnist_cnn", "mnist_mlp", "vgg_16", "vgg_19", "inception_v3", "resnet_v2_50",
            "resnet_v2_101", "mobilenet_v2", "efficientnet_b0"} <= set(MODELS)
    for name, spec in MODELS.items():
        assert isinstance(spec, ModelSpec) and spec.name == name and spec.description
        assert spec.input_shape == FAMILY_SHAPES.get(spec.family, spec.input_shape)
        assert spec.family in ("imagenet", "cifar", "mnist", "slim")
    assert get_spec("inception_v3").input_shape == (299, 299, 3)
    assert get_spec("nasnet_large").input_shape == (331, 331, 3)


def test_get_spec_is_case_insensitive_and_names_close_matches():
    assert get_spec(" VGG-19 ").name == "vgg_19"
    with pytest.raises(UserError, match=r"resnet50") as err:
        get_spec("resnet51")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="none is close"):
        get_spec("transformer_xl")


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"resnet_size": 101}, "resnet101"),
    ({"resnet_size": "50"}, "resnet50"),
    ({"model_name": "vgg_19"}, "vgg_19"),
    ({"model": "cifar_resnet56", "resnet_size": 56}, "cifar_resnet56"),
    ({"model": "ResNet18", "model_name": "vgg_16"}, "resnet18"),
    ({"model_name": "inception_v3", "resnet_size": 50}, "inception_v3"),
])
def test_resolve_alias_maps_historical_flags(kwargs, expected):
    assert resolve_alias(**kwargs) == expected


def test_resolve_alias_rejects_what_does_not_exist():
    with pytest.raises(UserError, match="choose one of 18, 34, 50, 101, 152, 200"):
        resolve_alias(resnet_size=56)
    with pytest.raises(UserError, match="choose one of"):
        resolve_alias(resnet_size="fifty")
    with pytest.raises(UserError, match="did you mean .*vgg_16"):
        resolve_alias(model_name="vgg_17")
    with pytest.raises(UserError, match="no model given"):
        resolve_alias()


def test_min_input_size():
    assert min_input_size("inception_v3") == 75
    assert min_input_size("resnet50") == 32
    assert min_input_size("cifar_resnet20") == 8
    assert min_input_size("mnist_cnn") == 28


def test_import_does_not_load_tensorflow():
    code = ("import sys, tfyard.models, tfyard.cli.models; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))")
    assert python_prints(code) == "[]"


def test_a_name_registers_once_with_its_builder():
    from tfyard.models.registry import register_model

    assert get_spec("cifar_resnet20").residual and not get_spec("vgg_19").residual
    assert callable(get_spec("mnist_cnn").build)
    with pytest.raises(ValueError, match="resnet50 registered twice"):
        register_model(["resnet50"], "imagenet", (224, 224, 3), str)(lambda *args: None)
    assert get_spec("resnet50").description == "ResNet-50 v1.5 for ImageNet"
