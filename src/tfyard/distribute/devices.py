"""The GPUs a member trains on, as the driver names them: the line a run starts with, the
cards that decide `--dtype auto` and a benchmark's peak, and whether logical GPUs were carved
from one card (which decides how Mirrored reduces). Read from TensorFlow once the strategy
is made; nothing here builds one.
"""

from __future__ import annotations

import os


def describe_devices(num_gpus: int) -> str:
    """The devices a member trains on, named as the driver names them, with the memory each
    may use ("1 GPU: NVIDIA H200 (compute 9.0, 131.6 GiB, memory growth on)"), so a run's
    first lines say whether the GPU was found at all and what a trial sharing it got."""
    if not num_gpus:
        return "on the CPU"
    import tensorflow as tf

    from tfyard import compat

    gpus = compat.local_gpus()[:num_gpus]
    cards = {card for _, _, card in gpus}
    names = [f"{_card_field(card, 'name')} (compute {_card_field(card, 'compute capability')}"
             f", {memory / 2**30:.1f} GiB)" for _, memory, card in gpus]
    counted = {name: names.count(name) for name in names}
    kinds = ", ".join(f"{count} x {name}" if count > 1 else name
                      for name, count in counted.items())
    growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH") == "true" or any(
        tf.config.experimental.get_memory_growth(gpu)
        for gpu in tf.config.list_physical_devices("GPU"))
    shared = f", carved from {len(cards)} card(s)" if len(cards) < len(gpus) else ""
    return (f"on {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}: {kinds}{shared}"
            f"{', memory growth on' if growth else ''}")


def _card_field(card: str, field: str) -> str:
    """One field of TensorFlow's description of a card ("device: 0, name: NVIDIA H200, pci
    bus id: ..., compute capability: 9.0")."""
    fields = dict(part.split(": ", 1) for part in card.split(", ") if ": " in part)
    return fields.get(field, "?")


def gpu_cards(num_gpus: int) -> list[tuple[str, tuple[int, int]]]:
    """(name, compute capability) of each GPU a member trains on: what decides `--dtype
    auto` and the peak a benchmark is measured against. Call once the strategy is made."""
    if not num_gpus:
        return []
    from tfyard import compat

    return [(_card_field(card, "name"),
             tuple(int(n) for n in _card_field(card, "compute capability").split(".")
                   if n.isdigit()) or (0, 0))
            for _, _, card in compat.local_gpus()[:num_gpus]]


def shares_a_card(devices: list[str]) -> bool:
    """Whether some of these logical GPUs were carved from one card: NCCL refuses two ranks
    on one GPU, so their all-reduce goes through one device instead."""
    from tfyard import compat

    cards = {name: card for name, _, card in compat.local_gpus()}
    used = [cards.get(name.replace("/gpu:", "/device:GPU:"), name) for name in devices]
    return len(set(used)) < len(used)
