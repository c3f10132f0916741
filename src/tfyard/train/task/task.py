"""What is trained: the task seam between the loop and image classification.

A `Task` is a model source and an input (`train.inputs`): how to build the model inside the
strategy scope, the train and evaluation input, the objective (loss and reported sums), the
optimizer, the export signature, and the identity run.json records. The loop, the
Controller and its actions know nothing else about what they train.

Model sources:
- `RegistryModel`: a name from `tfyard models`, trained with its family's recipe;
- `FunctionModel`: the user's function (`MODULE:FUNCTION`, or the function itself), called
  with whichever of `num_classes` and `input_shape` it accepts. A model it returns compiled
  is trained as compiled (its optimizer, loss and metrics); an uncompiled one outputs logits
  and gets the recipe of its input size (CIFAR up to 64 px, ImageNet above).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfyard import compat
from tfyard.errors import UserError, plain_op_error
from tfyard.models import create_model, get_spec
from tfyard.models.factory import scoped_dtype_policy
from tfyard.train.task import usercode
from tfyard.train.task.objectives import Classification, Compiled


class RegistryModel:
    """A model of the registry."""

    def __init__(self, name: str, zero_init_residual: bool = False):
        self.spec = get_spec(name)
        self.name = self.spec.name
        self.zero_init_residual = zero_init_residual

    def family(self, input_shape) -> str:
        return self.spec.family

    def build(self, num_classes: int, input_shape, dtype_policy):
        return create_model(self.name, num_classes, input_shape, dtype_policy=dtype_policy,
                            zero_init_residual=self.zero_init_residual)


class FunctionModel:
    """The user's model function; `name` is the reference run.json records."""

    def __init__(self, function, name: str | None = None):
        if isinstance(function, str):
            name, function = function, usercode.load(function)
        self.function = function
        self.name = name or usercode.reference_of(function) or getattr(
            function, "__name__", "model_fn")

    def family(self, input_shape) -> str:
        return "cifar" if max(input_shape[:2]) <= 64 else "imagenet"

    def build(self, num_classes: int | None, input_shape, dtype_policy):
        with scoped_dtype_policy(dtype_policy):
            try:
                model = usercode.call_with_accepted(
                    self.function, num_classes=num_classes, input_shape=tuple(input_shape))
            except UserError:
                raise
            except Exception as exc:
                first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
                raise UserError(f"--model {self.name}: the function raised "
                                f"{type(exc).__name__}: {first}; fix it") from None
        if not isinstance(model, keras.Model):
            raise UserError(f"--model {self.name}: the function returned "
                            f"{type(model).__name__}, not a keras.Model; return the model")
        return model


def output_width(model, input_shape) -> int:
    """The last dimension of the model's output for one example (builds a lazy model)."""
    outputs = model.outputs if getattr(model, "outputs", None) else None
    if not outputs:
        outputs = model(tf.zeros([1, *input_shape]), training=False)
    outputs = tf.nest.flatten(outputs)
    if len(outputs) != 1:
        raise UserError(f"the model has {len(outputs)} outputs; tfyard trains a classifier "
                        "with one output (class scores)")
    return int(outputs[0].shape[-1])


def check_one_input(model, name: str) -> None:
    """Refuse a model of several inputs before any step: every input tfyard reads gives one
    tensor x per batch (a dataset's images; an `input_fn`'s x must be a tensor), so such a
    model would fail inside the traced step, and its export could serve only one input."""
    inputs = getattr(model, "inputs", None) or []   # a subclassed model declares none
    if len(inputs) > 1:
        names = ", ".join(str(getattr(t, "name", "?")) for t in inputs)
        raise UserError(f"--model {name}: the model has {len(inputs)} inputs ({names}) but "
                        "tfyard feeds it one tensor x per batch; build it on one keras.Input "
                        "(concatenate the features into x, split them inside the model)")


class Task:
    """A model source trained on an input; see the module docstring."""

    def __init__(self, model, data, num_classes: int | None = None, class_names=None):
        self.model_source, self.data = model, data
        self.num_classes = data.num_classes or num_classes
        self.input_shape = tuple(data.input_shape)
        self.given_names = tuple(class_names) if class_names is not None else None

    @property
    def class_names(self) -> tuple[str, ...]:
        """The name of each class id: given, else the data's, else the id itself."""
        names = self._named()
        return tuple(names) if names else tuple(map(str, range(self.num_classes)))

    def _named(self):
        return self.given_names or self.data.class_names

    @property
    def preprocessing(self):
        """The eval view of the input (`data.Preprocessing`); None for a user's input."""
        return self.data.preprocessing

    @property
    def family(self) -> str:
        return self.model_source.family(self.input_shape)

    def identity(self) -> dict:
        """What run.json records and a rerun in the same output_dir must match."""
        return {"model": self.model_source.name, "dataset": self.data.name,
                "num_classes": self.num_classes}

    def build_model(self, dtype_policy=None):
        """The model, inside the caller's strategy scope, checked against the classes."""
        model = self.model_source.build(self.num_classes, self.input_shape, dtype_policy)
        check_one_input(model, self.model_source.name)
        width = output_width(model, self.input_shape)
        compiled = compiled_loss(model) is not None
        if self.num_classes is None:
            self.num_classes = 2 if compiled and width == 1 else width
        elif width != self.num_classes and not (compiled and width == 1
                                                and self.num_classes == 2):
            raise UserError(f"--model {self.model_source.name}: the model outputs {width} "
                            f"values per example but the data has {self.num_classes} classes; "
                            f"end the model with a Dense({self.num_classes}) layer")
        names = self._named()
        if names is not None and len(names) != self.num_classes:
            raise UserError(f"{len(names)} class names for {self.num_classes} classes (the "
                            f"model's outputs); give one name per class")
        return model

    def objective(self, model, label_smoothing: float = 0.0):
        """The compiled loss and metrics of a compiled model, else tfyard's recipe."""
        loss = compiled_loss(model)
        if loss is None:
            return Classification(self.num_classes, label_smoothing)
        labels = self.data.label_example()
        outputs = tf.zeros([1, output_width(model, self.input_shape)])
        try:   # one example, eagerly: a loss that does not fit the labels fails here
            loss(labels, outputs)
        except (ValueError, TypeError, tf.errors.InvalidArgumentError) as exc:
            name = getattr(loss, "name", None) or getattr(loss, "__name__", "")
            raise UserError(
                f"--model {self.model_source.name}: its loss {name} does not fit the labels "
                f"({labels.dtype.name} {_batch_shape(labels)}): "
                f"{plain_op_error(exc)[:160]}; compile it with a loss for these labels "
                "(SparseCategoricalCrossentropy for class ids)") from None
        return Compiled(loss, compat.compiled_metrics(model, labels, outputs))

    def compiled_optimizer(self, model):
        """The optimizer the user compiled in, or None for the recipe's."""
        return model.optimizer if compiled_loss(model) is not None else None


def _batch_shape(tensor) -> str:
    """`[batch]` for class ids, `[batch, 10]` for one-hot labels."""
    return "[" + ", ".join(["batch", *map(str, tensor.shape[1:])]) + "]"


def compiled_loss(model):
    """The loss a model was compiled with (a Loss or a per-example function), or None.
    Several outputs' losses (a list or dict) are refused: tfyard trains one output."""
    loss = getattr(model, "loss", None) if getattr(model, "compiled", False) else None
    if loss is None:
        return None
    if isinstance(loss, list | tuple | dict):
        raise UserError("the model was compiled with several losses; tfyard trains a "
                        "classifier with one output and one loss")
    return keras.losses.get(loss) if isinstance(loss, str) else loss


def make_task(options, plat, model=None, data=None, eval_data=None,
              num_classes: int | None = None, strategy=None, class_names=None) -> Task:
    """The task of a run: `model` (a registry name, `MODULE:FUNCTION` or a function; default
    `options.model`) on `data` (a registry name, `MODULE:FUNCTION` or an `input_fn`; default
    `options.dataset`), with `eval_data` like `data` for a user's input. A user's input is
    probed with the InputContext `strategy` will hand it (default: one replica).
    `class_names` name the classes by id (default: the data's names, else the ids)."""
    from tfyard.train.task.inputs import FunctionInput, RegistryInput

    model = options.model if model is None else model
    if callable(model) or usercode.is_reference(model):
        source = FunctionModel(model)
    else:
        source = RegistryModel(model, options.zero_init_residual)
    data = options.dataset if data is None else data
    if callable(data) or usercode.is_reference(data):
        name = data if isinstance(data, str) else usercode.reference_of(data) or "input_fn"
        evaluation = None if eval_data is None else _function(eval_data, "eval_data")
        source_data = FunctionInput(_function(data, "data"), evaluation, name, num_classes,
                                    strategy)
    else:
        source_data = RegistryInput(
            options if data == options.dataset else options.with_updates(dataset=data), plat,
            remote=isinstance(strategy, tf.distribute.experimental.ParameterServerStrategy))
    return Task(source, source_data, num_classes, class_names)


def _function(function, what: str):
    return usercode.load(function, what) if isinstance(function, str) else function
