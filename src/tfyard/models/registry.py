"""The model names tfyard knows, as plain data: no TensorFlow import, so listing is instant.

Naming scheme (one flat namespace, no clashes):
- `resnet18 ... resnet200`: ResNet v1.5 for ImageNet (`--resnet_size=N` maps to `resnetN`).
- `cifar_resnet8 ... cifar_resnet110`: the CIFAR ResNets of He et al. (depth 6n+2; 8 is the
  smallest, one block per stage, for quick checks).
- `mnist_cnn`, `mnist_mlp`: the Keras MNIST examples.
- TF-Slim names (`vgg_19`, `inception_v3`, `resnet_v2_50`, ...): Keras applications.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from tfyard.errors import UserError

IMAGENET_DEPTHS = (18, 34, 50, 101, 152, 200)
CIFAR_DEPTHS = (8, 20, 32, 44, 56, 110)
DEFAULT_NUM_CLASSES = {"imagenet": 1000, "slim": 1000, "cifar": 10, "mnist": 10}
# The dataset each family is trained on by default (benchmarks bench a model on its own).
FAMILY_DATASET = {"imagenet": "imagenet", "slim": "imagenet", "cifar": "cifar10",
                  "mnist": "mnist"}


@dataclass(frozen=True)
class SlimApp:
    """How one TF-Slim name maps onto `keras.applications.<app>(weights=None, **kwargs)`."""

    app: str
    size: int
    min_size: int = 32
    kwargs: tuple[tuple[str, object], ...] = ()
    note: str = ""


def _slim_table() -> dict[str, SlimApp]:
    table = {
        "vgg_16": SlimApp("VGG16", 224),
        "vgg_19": SlimApp("VGG19", 224),
        "inception_v3": SlimApp("InceptionV3", 299, min_size=75),
        "inception_resnet_v2": SlimApp("InceptionResNetV2", 299, min_size=75),
    }
    for depth in (50, 101, 152):
        table[f"resnet_v2_{depth}"] = SlimApp(f"ResNet{depth}V2", 224)
    for suffix, alpha in (("", 1.0), ("_075", 0.75), ("_050", 0.5), ("_025", 0.25)):
        table[f"mobilenet_v1{suffix}"] = SlimApp("MobileNet", 224, kwargs=(("alpha", alpha),))
    for suffix, alpha in (("", 1.0), ("_140", 1.4), ("_035", 0.35)):
        table[f"mobilenet_v2{suffix}"] = SlimApp("MobileNetV2", 224, kwargs=(("alpha", alpha),))
    for size in ("large", "small"):
        table[f"mobilenet_v3_{size}"] = SlimApp(
            f"MobileNetV3{size.title()}", 224, kwargs=(("include_preprocessing", False),))
    table["nasnet_mobile"] = SlimApp("NASNetMobile", 224)
    table["nasnet_large"] = SlimApp("NASNetLarge", 331)
    table["efficientnet_b0"] = SlimApp("EfficientNetB0", 224,
                                       note=" (rescales 0-255 pixels itself)")
    return table


SLIM_APPS = _slim_table()


def _depth(name: str) -> int:
    return int(name.rpartition("resnet")[2])


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str  # "imagenet" | "cifar" | "mnist" | "slim": the loop picks its recipe by family
    input_shape: tuple[int, int, int]  # the input size it expects by default
    description: str
    build: Callable = field(repr=False, compare=False)  # (name, num_classes, shape, zero_init)
    min_size: int = 32              # the smallest square input the architecture accepts
    residual: bool = False          # has residual blocks (zero_init_residual applies)


MODELS: dict[str, ModelSpec] = {}


def register_model(names, family: str, input_shape: tuple[int, int, int],
                   describe: Callable[[str], str], min_size: int | None = None,
                   residual: bool = False):
    """Register `build(name, num_classes, shape, zero_init_residual)` for each of `names`.

    The one place a model (and its family) is declared, as timm's `@register_model`; the
    builder imports Keras itself, so registering stays instant.
    """
    def decorator(build: Callable) -> Callable:
        for name in names:
            if name in MODELS:
                raise ValueError(f"model {name} registered twice")
            MODELS[name] = ModelSpec(name, family, input_shape, describe(name), build,
                                     input_shape[0] if min_size is None else min_size, residual)
        return build
    return decorator


@register_model([f"resnet{d}" for d in IMAGENET_DEPTHS], "imagenet", (224, 224, 3),
                lambda name: f"ResNet-{_depth(name)} v1.5 for ImageNet", 32, residual=True)
def _imagenet_resnet(name, num_classes, shape, zero_init_residual):
    from tfyard.models import resnet

    return resnet.imagenet_resnet(_depth(name), num_classes, shape, zero_init_residual, name=name)


@register_model([f"cifar_resnet{d}" for d in CIFAR_DEPTHS], "cifar", (32, 32, 3),
                lambda name: f"ResNet-{_depth(name)} for CIFAR (3 stages x "
                f"{(_depth(name) - 2) // 6} blocks, 16/32/64 filters)", 8, residual=True)
def _cifar_resnet(name, num_classes, shape, zero_init_residual):
    from tfyard.models import resnet

    return resnet.cifar_resnet(_depth(name), num_classes, shape, zero_init_residual, name=name)


_MNIST = {"mnist_cnn": "Keras MNIST example: 2 conv + pool, dropout",
          "mnist_mlp": "2 hidden layers of 512 with dropout"}


@register_model(_MNIST, "mnist", (28, 28, 1), _MNIST.get)
def _mnist(name, num_classes, shape, zero_init_residual):
    from tfyard.models import mnist

    return getattr(mnist, name)(num_classes, shape)


def _slim_description(name: str) -> str:
    app = SLIM_APPS[name]
    return f"keras.applications.{app.app}" + "".join(f", {k}={v}" for k, v in app.kwargs) \
        + app.note


def _register_slim() -> None:
    for name, app in SLIM_APPS.items():
        register_model([name], "slim", (app.size, app.size, 3), _slim_description,
                       app.min_size)(_slim)


def _slim(name, num_classes, shape, zero_init_residual):
    from tfyard.models.applications import slim_model

    return slim_model(name, num_classes, shape, SLIM_APPS[name])


_register_slim()


def model_names() -> list[str]:
    return list(MODELS)


def _normalize(name: str) -> str:
    return name.strip().lower().replace("-", "_")


def get_spec(name: str) -> ModelSpec:
    """The spec for `name` (case-insensitive); a UserError names the close matches."""
    key = _normalize(name)
    if key in MODELS:
        return MODELS[key]
    close = difflib.get_close_matches(key, MODELS, n=5, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "none is close"
    raise UserError(f"unknown model {name!r}: {hint} (`tfyard models` lists them all)")


def resolve_alias(model: str | None = None, resnet_size: int | None = None,
                  model_name: str | None = None) -> str:
    """The registry name for the historical flags, first given wins: `--model`,
    slim's `--model_name` (`vgg_19` -> `vgg_19`), then `--resnet_size=N` (-> `resnetN`, the
    ImageNet ResNet; a CIFAR script passes `model=f"cifar_resnet{N}"` instead)."""
    if model:
        return get_spec(model).name
    if model_name:
        return get_spec(model_name).name
    if resnet_size is not None:
        name = f"resnet{str(resnet_size).strip()}"
        if name not in MODELS or MODELS[name].family != "imagenet":
            sizes = ", ".join(map(str, IMAGENET_DEPTHS))
            raise UserError(f"--resnet_size={resnet_size} is not available; choose one of {sizes}")
        return name
    raise UserError("no model given; pass --model NAME (see `tfyard models`)")


def min_input_size(name: str) -> int:
    """The smallest square input the architecture accepts (Inception needs 75)."""
    return get_spec(name).min_size


def check_input_size(name: str, height: int, width: int) -> None:
    """A UserError if `name` cannot take height x width images; needs no TensorFlow, so a
    too small --image_size is refused before anything loads."""
    floor = min_input_size(name)
    if min(height, width) < floor:
        raise UserError(f"{get_spec(name).name} needs images of at least {floor}x{floor}, got "
                        f"{height}x{width}; pass --image_size {floor} or more")
