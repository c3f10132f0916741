"""Learning-rate schedule (linear warm-up, then piecewise or cosine) and the optimizer."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfyard.train.task.recipes import Resolved


@keras.saving.register_keras_serializable("tfyard")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak`, then /10 at each boundary (piecewise) or cosine to zero."""

    def __init__(self, peak: float, total_steps: int, warmup_steps: int = 0,
                 boundaries: tuple[int, ...] = (), kind: str = "piecewise"):
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.boundaries = tuple(int(b) for b in boundaries)
        self.kind = kind

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        if self.kind == "cosine":
            span = max(1, self.total_steps - self.warmup_steps)
            progress = tf.clip_by_value((step - self.warmup_steps) / span, 0.0, 1.0)
            decayed = 0.5 * self.peak * (1.0 + tf.cos(progress * 3.141592653589793))
        else:
            drops = tf.add_n([tf.cast(step >= b, tf.float32) for b in self.boundaries]) \
                if self.boundaries else 0.0
            decayed = self.peak * tf.pow(0.1, drops)
        if self.warmup_steps:
            warm = self.peak * (step + 1.0) / self.warmup_steps
            return tf.where(step < self.warmup_steps, warm, decayed)
        return decayed

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "boundaries": self.boundaries,
                "kind": self.kind}


def make_schedule(numbers: Resolved) -> WarmupSchedule:
    per_epoch = numbers.steps_per_epoch
    return WarmupSchedule(
        peak=numbers.learning_rate,
        total_steps=numbers.total_steps,
        warmup_steps=numbers.warmup_steps,
        boundaries=tuple(int(e * per_epoch) for e in numbers.decay_epochs),
        kind=numbers.lr_schedule,
    )


def decayed_variables(model) -> list:
    """The weights weight decay applies to, for SGD and AdamW alike: the kernels (every
    trainable weight of two or more dimensions), not biases, norms' scales and offsets."""
    return [v for v in model.trainable_variables if len(v.shape) > 1]


def make_optimizer(numbers: Resolved, momentum: float, nesterov: bool, dtype: str, model):
    """SGD with momentum (L2 decay as a gradient term, in the step) or AdamW (decoupled
    decay); both decay `decayed_variables(model)`."""
    schedule = make_schedule(numbers)
    if numbers.optimizer == "adamw":
        optimizer = keras.optimizers.AdamW(learning_rate=schedule,
                                           weight_decay=numbers.weight_decay)
        decayed = {id(v) for v in decayed_variables(model)}
        optimizer.exclude_from_weight_decay(
            var_list=[v for v in model.trainable_variables if id(v) not in decayed])
    else:
        optimizer = keras.optimizers.SGD(learning_rate=schedule, momentum=momentum,
                                         nesterov=nesterov)
    if dtype == "float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
