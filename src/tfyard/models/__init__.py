"""Model registry: names, specs and `create_model`, with Keras imported only when building.

See `tfyard.models.registry` for the naming scheme.
"""

from tfyard.models.factory import create_model, policy_name, scoped_dtype_policy
from tfyard.models.registry import (
    MODELS,
    ModelSpec,
    check_input_size,
    get_spec,
    min_input_size,
    model_names,
    resolve_alias,
)
from tfyard.models.stats import count_params, multiply_adds

__all__ = [
    "MODELS",
    "ModelSpec",
    "check_input_size",
    "count_params",
    "create_model",
    "get_spec",
    "min_input_size",
    "model_names",
    "multiply_adds",
    "policy_name",
    "resolve_alias",
    "scoped_dtype_policy",
]
