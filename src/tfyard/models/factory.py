"""`create_model`: a registry name -> a fresh Keras 3 model emitting float32 logits.

Keras is imported inside the functions, so `import tfyard.models` stays instant.
"""

from __future__ import annotations

import contextlib

from tfyard.errors import UserError
from tfyard.models.registry import check_input_size, get_spec

_POLICIES = {
    None: "float32", "float32": "float32",
    "bfloat16": "mixed_bfloat16", "mixed_bfloat16": "mixed_bfloat16",
    "float16": "mixed_float16", "mixed_float16": "mixed_float16",
}


def policy_name(dtype_policy: str | None) -> str:
    """The Keras policy for `--dtype` spellings: float32, (mixed_)bfloat16, (mixed_)float16."""
    try:
        return _POLICIES[dtype_policy]
    except KeyError:
        raise UserError(f"unknown dtype policy {dtype_policy!r}; use float32, "
                        "mixed_bfloat16 or mixed_float16") from None


@contextlib.contextmanager
def scoped_dtype_policy(dtype_policy: str | None):
    """Set the global Keras dtype policy for the layers built inside, then restore it."""
    import keras

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(policy_name(dtype_policy))
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def create_model(name: str, num_classes: int, input_shape: tuple[int, int, int] | None = None,
                 dtype_policy: str | None = None, zero_init_residual: bool = False):
    """Build registry model `name` for `num_classes` with random weights.

    `input_shape` defaults to the spec's; `dtype_policy` is None/"float32", "mixed_bfloat16"
    or "mixed_float16" (the logits stay float32); `zero_init_residual` (ResNets only) starts
    the last batch-norm gamma of each residual block at zero.
    """
    spec = get_spec(name)
    shape = tuple(int(d) for d in (input_shape or spec.input_shape))
    if len(shape) != 3 or min(shape) < 1:
        raise UserError(f"input shape {shape} for {spec.name} must be (height, width, channels)")
    check_input_size(spec.name, *shape[:2])
    if int(num_classes) < 1:
        raise UserError(f"num_classes={num_classes} must be at least 1")
    if zero_init_residual and not spec.residual:
        raise UserError(f"zero_init_residual applies to ResNets only, not {spec.name}; drop it")
    with scoped_dtype_policy(dtype_policy):
        return spec.build(spec.name, int(num_classes), shape, zero_init_residual)
