"""The published recipes: the optimisation defaults each model family was trained with
(the task names its family), and the concrete numbers a run resolves from one (`train.build`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Recipe:
    """Published defaults for a model family: lr = base_lr x global_batch / base_batch."""

    batch_size: int
    base_lr: float
    base_batch: int
    epochs: float
    optimizer: str
    lr_schedule: str
    decay_epochs: tuple[float, ...]
    warmup_epochs: float
    weight_decay: float


RECIPES = {
    # Goyal et al. 2017 / TF official ResNet-50 v1.5: SGD 0.9, lr 0.1 x B/256, 5 warm-up epochs.
    "imagenet": Recipe(256, 0.1, 256, 90, "sgd", "piecewise", (30, 60, 80), 5, 1e-4),
    # He et al. 2016, CIFAR-10: lr 0.1 x B/128, /10 at epochs 91 and 136, stop at 182.
    "cifar": Recipe(128, 0.1, 128, 182, "sgd", "piecewise", (91, 136), 0, 2e-4),
    # The Keras MNIST convnet example: Adam(W) 1e-3, batch 128, 15 epochs.
    "mnist": Recipe(128, 1e-3, 128, 15, "adamw", "piecewise", (), 0, 0.0),
    # TF-Slim train_image_classifier: batch 32, lr 0.01, weight decay 4e-5.
    "slim": Recipe(32, 0.01, 32, 100, "sgd", "cosine", (), 0, 4e-5),
}


@dataclass(frozen=True)
class Resolved:
    """The concrete numbers a run uses, after recipe, batch and replica arithmetic."""

    global_batch: int | None       # None: a user's input whose batch size varies
    per_replica_batch: int | None
    learning_rate: float
    optimizer: str
    lr_schedule: str
    decay_epochs: tuple[float, ...]
    warmup_epochs: float
    weight_decay: float
    steps_per_epoch: int
    total_steps: int

    @property
    def warmup_steps(self) -> int:
        return int(self.warmup_epochs * self.steps_per_epoch)
