"""What trains: layers chosen by name patterns, and the classifier head.

A pattern is a comma-separated list of regular expressions, each matched from the start of a
layer's name (`re.match`), so TF-Slim's scope prefixes (`--trainable_scopes=Logits`) work as
written. A pattern that names a nested model selects every layer inside it. Freezing is
`layer.trainable = False` on each selected layer that holds weights: its weights leave
`model.trainable_variables`, so the optimizer, weight decay and gradients never see them,
and a frozen BatchNormalization normalises with its moving statistics and never updates
them (Keras 3 runs it in inference mode; a graph-level `training=False` would not hold,
keras#20285).
"""

from __future__ import annotations

import re

from tfyard import compat
from tfyard.errors import UserError


def weighted_layers(model) -> list:
    """The layers that own weights directly (no container models), in the model's order."""
    owners = owner_of_weights(model)
    seen, layers = set(), []
    for variable in model.weights:
        layer = owners[id(variable)]
        if id(layer) not in seen:
            seen.add(id(layer))
            layers.append(layer)
    return layers


def owner_of_weights(model) -> dict[int, object]:
    """id(weight) -> the innermost layer holding it (`all_layers` lists parents first)."""
    owners = {}
    for layer in compat.all_layers(model):
        for variable in layer.weights:
            owners[id(variable)] = layer
    return owners


def select_layers(model, patterns, flag: str) -> set[int]:
    """ids of the layers whose name matches one of `patterns` and of every layer nested in
    them; a pattern that matches no layer is an error naming `flag`."""
    layers = compat.all_layers(model)
    selected: set[int] = set()
    for pattern in patterns:
        matched = [layer for layer in layers if re.match(pattern, layer.name)]
        if not matched:
            names = ", ".join(layer.name for layer in weighted_layers(model)[:6])
            raise UserError(f"{flag} {pattern!r} matches no layer of {model.name} (its layers "
                            f"with weights: {names}, ...); patterns match layer names from "
                            "their start")
        for layer in matched:
            selected.update(id(inner) for inner in compat.all_layers(layer))
    return selected


def head_layer(model, width: int | None):
    """The classifier head: the last layer with a kernel (a weight of 2 or more dimensions)
    whose output width is `width` (the model's), or None."""
    for layer in reversed(weighted_layers(model)):
        kernel = next((w for w in layer.weights if len(w.shape) >= 2), None)
        if kernel is not None and (width is None or kernel.shape[-1] == width):
            return layer
    return None


def freeze(model, trainable=None, frozen=None, head=None) -> list[str]:
    """Freeze every weighted layer outside `trainable` (patterns; `head` alone when the
    head is the only thing to train) or inside `frozen`; returns the frozen layers' names."""
    layers = weighted_layers(model)
    chosen = {id(layer) for layer in layers}
    if trainable:
        chosen &= select_layers(model, trainable, "--trainable")
    if head is not None:
        chosen &= {id(head)}
    if frozen:
        chosen -= select_layers(model, frozen, "--freeze")
    names = []
    for layer in layers:
        if id(layer) not in chosen and layer.trainable:
            layer.trainable = False
            names.append(layer.name)
    if layers and not model.trainable_variables:
        raise UserError("nothing is left to train: --trainable/--freeze froze every layer of "
                        f"{model.name}; leave at least one layer trainable")
    return names


def describe_frozen(names: list[str], shown: int = 3) -> str:
    """`frozen: c1, bn1, c2 (3 layers)`."""
    listed = ", ".join(names[:shown]) + (", ..." if len(names) > shown else "")
    return f"frozen: {listed} ({len(names)} layer{'s' if len(names) != 1 else ''})"
