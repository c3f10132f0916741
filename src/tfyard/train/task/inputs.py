"""The input of a task: a registry dataset, or the user's `input_fn(input_context)`.

Both give the Trainer `train(context, start_step)`, per-replica batches beginning with those
of step `start_step` (how a resume continues where it stopped), and evaluation batches.

A user's `input_fn` returns a `tf.data.Dataset` of per-replica batches `(x, y)` or
`(x, y, sample_weight)` (Keras's convention). A finite dataset is one epoch and is repeated
for more; an endless one needs the number of steps. A resume skips the batches the steps
before it consumed, so it continues with the ones after; that is exact when the function
builds the same sequence every time it is called (shuffles and augmentations with fixed
seeds, `deterministic` order), as "Exact resume" in docs/faults.md says.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from tfyard.data import build_dataset, checked, dataset_info, local_data
from tfyard.errors import UserError
from tfyard.train.task import usercode


def model_input_shape(image_shape, image_size: int | None) -> tuple[int, int, int]:
    height, width, channels = image_shape
    if image_size:
        height = width = image_size
    return (height, width, channels)


REMOTE_REFUSAL = ("a parameter-server run cannot read it through the cache (its workers "
                  "build the input, away from it); train without parameter servers")


class RegistryInput:
    """A dataset of the data registry, read as `tfyard train --dataset NAME` reads it."""

    seeded = True   # the order is a function of the example number (`tfyard.data.order`)

    def __init__(self, options, plat, remote: bool = False):
        self.options, self.plat = options, plat
        # the data's directory on local disk: where it is in a bucket, copied once, or read
        # through a bounded cache when it is larger than --data_cache_limit, but where the
        # input is built on `remote` workers (parameter servers), away from the cache
        self.data_dir = local_data(options.dataset, plat.data_dir, plat.work_dir,
                                   options.data_cache_limit, REMOTE_REFUSAL if remote else None)
        self.info = dataset_info(options.dataset, self.data_dir, cache_dir=plat.work_dir)
        self.name = self.info.name   # the canonical spelling (`folder` is `imagefolder`)
        self.num_classes = self.info.num_classes
        self.input_shape = model_input_shape(self.info.image_shape, options.image_size)
        self.train_examples = self.info.num_examples["train"]
        self.class_names = self.info.class_names
        self.preprocessing = (self.info.preprocessing.resized(self.input_shape[0])
                              if self.info.preprocessing else None)
        self.has_eval = True
        self.eval_name = None   # the dataset's own validation split

    def steps(self, replicas: int):
        """(global batch, steps per epoch), or None where the options' batch decides."""
        return None

    def train(self, context, start_step: int, global_batch: int, seed: int | None):
        o = self.options
        return build_dataset(
            o.dataset, "train", self.data_dir,
            batch_size=context.get_per_replica_batch_size(global_batch),
            image_size=self.input_shape[0], dtype=o.dtype, input_context=context, seed=seed,
            start_example=start_step * global_batch, global_batch=global_batch,
            with_ids=o.record_example_ids, label_offset=o.label_offset,
            data_threads=o.data_threads, skip_corrupt=o.skip_corrupt,
            cache_dir=self.plat.work_dir)

    def evaluation(self, context, per_replica_batch: int, split: str = "validation"):
        o = self.options
        return build_dataset(
            o.dataset, split, self.data_dir, batch_size=per_replica_batch,
            image_size=self.input_shape[0], dtype=o.dtype, input_context=context,
            label_offset=o.label_offset, data_threads=o.data_threads,
            skip_corrupt=o.skip_corrupt, cache_dir=self.plat.work_dir, evaluation=True)

    @staticmethod
    def label_example():
        import tensorflow as tf

        return tf.zeros([1], tf.int32)

    def checked(self, split: str):
        """Data errors while iterating become one line naming the file and record."""
        return checked(self.name, self.data_dir, split, cache_dir=self.plat.work_dir)


@dataclass(frozen=True)
class Probe:
    """What a user's input says of itself, read from one call before training."""

    per_replica_batch: int | None   # the static batch size, None when it varies
    batches: int | None             # per input pipeline; None: endless or unknown
    input_shape: tuple
    labels: object   # the TensorSpec of y


class FunctionInput:
    """The user's `input_fn(input_context)` (and `eval_fn`), with `name` for run.json."""

    seeded = False   # tfyard cannot reorder it; a resume skips what was consumed
    class_names = None   # the classes are their ids unless the caller names them
    preprocessing = None   # how its x was made from images is the user's own code

    def __init__(self, input_fn, eval_fn=None, name: str = "input_fn",
                 num_classes: int | None = None, strategy=None):
        """`strategy`: the one training runs under, whose InputContext the probe uses, so
        that it sees the real per-replica batch (`get_per_replica_batch_size`) and shard
        (`input_pipeline_id`); None (the evaluator side-car) probes as one replica."""
        import tensorflow as tf

        self.input_fn, self.eval_fn, self.name = input_fn, eval_fn, name
        self.num_classes = num_classes
        self.has_eval = eval_fn is not None
        self.eval_name = None if eval_fn is None else (
            usercode.reference_of(eval_fn) or getattr(eval_fn, "__name__", "eval_fn"))
        context = input_context(strategy) if strategy else tf.distribute.InputContext()
        self.probe = self._probe(input_fn, context, "data")
        self.input_shape = self.probe.input_shape
        self.train_examples = None
        if eval_fn is not None:
            self._probe(eval_fn, context, "eval_data")

    @staticmethod
    def _call(function, context, what: str):
        import tensorflow as tf

        try:
            dataset = function(context) if usercode.takes_an_argument(function) else function()
        except Exception as exc:
            raise UserError(f"{what}: the input function raised {type(exc).__name__}: "
                            f"{str(exc).splitlines()[0][:200] if str(exc) else ''}; fix it"
                            ) from None
        if not isinstance(dataset, tf.data.Dataset):
            raise UserError(f"{what}: the input function returned {type(dataset).__name__}, "
                            "not a tf.data.Dataset of (x, y) or (x, y, sample_weight) batches")
        return dataset

    def _probe(self, function, context, what: str) -> Probe:
        """Check the elements' structure and read the batch, shape and length."""
        import tensorflow as tf

        dataset = self._call(function, context, what)
        spec = dataset.element_spec
        if not isinstance(spec, tuple) or len(spec) not in (2, 3) or not all(
                isinstance(s, tf.TensorSpec) for s in spec):
            raise UserError(f"{what}: the input's elements are {_describe(spec)}; they must "
                            "be (x, y) or (x, y, sample_weight), each one tensor of "
                            "per-replica batches")
        x = spec[0]
        if x.shape.rank is None or x.shape.rank < 2:
            raise UserError(f"{what}: x has shape {x.shape}; it must be batched "
                            "([batch, ...]): add .batch(per-replica batch size)")
        cardinality = int(dataset.cardinality())
        return Probe(per_replica_batch=x.shape[0], input_shape=tuple(x.shape[1:]),
                     batches=cardinality if cardinality >= 0 else None, labels=spec[1])

    def steps(self, replicas: int, pipelines: int = 1):
        """(global batch or None, steps per epoch or None) of a step over `replicas`."""
        probe = self.probe
        global_batch = probe.per_replica_batch * replicas if probe.per_replica_batch else None
        if probe.batches is None:
            return global_batch, None
        per_pipeline = max(1, replicas // pipelines)
        if probe.batches < per_pipeline:
            raise UserError(f"data: the input has {probe.batches} batch(es), fewer than one "
                            f"step takes ({per_pipeline}); add data or .repeat()")
        return global_batch, probe.batches // per_pipeline

    def train(self, context, start_step: int, global_batch, seed):
        dataset = self._call(self.input_fn, context, "data")
        if self.probe.batches is not None:
            dataset = dataset.repeat()   # one epoch each pass, as Keras fit does
        per_step = max(1, context.num_replicas_in_sync // context.num_input_pipelines)
        return dataset.skip(start_step * per_step) if start_step else dataset

    def evaluation(self, context, per_replica_batch: int, split: str = "validation"):
        return self._call(self.eval_fn, context, "eval_data")

    def label_example(self):
        import tensorflow as tf

        spec = self.probe.labels
        return tf.zeros([1, *spec.shape[1:]], spec.dtype)

    def checked(self, split: str):
        return contextlib.nullcontext()


def input_context(strategy):
    """The InputContext `strategy` hands an input function in this process (pipelines, this
    one's id, replicas in sync), read by letting it call one."""
    import tensorflow as tf

    seen = []

    def capture(context):
        seen.append(context)
        return tf.data.Dataset.range(1)

    strategy.distribute_datasets_from_function(capture)
    # a parameter-server strategy calls it later, on each worker: one pipeline of its own
    return seen[0] if seen else tf.distribute.InputContext(
        num_replicas_in_sync=strategy.num_replicas_in_sync)


def _describe(spec, top: bool = True) -> str:
    """An element spec in words, parts included: `(tensor, (tensor, tensor))`."""
    import tensorflow as tf

    if isinstance(spec, tf.TensorSpec):
        return f"single tensors {spec.shape}" if top else "tensor"
    if isinstance(spec, dict):
        return f"a dict with keys {sorted(spec)}"
    if isinstance(spec, tuple):
        return "(" + ", ".join(_describe(part, top=False) for part in spec) + ")"
    return type(spec).__name__
