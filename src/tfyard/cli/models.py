"""`tfyard models`: the registered models, their input size, parameters and optionally FLOPs."""

from __future__ import annotations

import json

from tfyard.models import registry


def register(commands) -> None:
    models = commands.add_parser(
        "models", help="list the models with input size and parameter count",
        description="Builds each model (its shapes: no weight is initialized) to count its "
        "trainable parameters (batch-norm moving statistics excluded); listing all takes "
        "some seconds.")
    models.add_argument("names", nargs="*", metavar="NAME", help="only these models")
    models.add_argument("--family", choices=sorted(registry.DEFAULT_NUM_CLASSES),
                        help="only this family")
    models.add_argument("--flops", action="store_true",
                        help="also report multiply-adds per image at the default input size")
    models.add_argument("--num_classes", "--num-classes", type=int, default=None,
                        help="classes of the top layer (default: 1000 imagenet/slim, 10 others)")
    models.add_argument("--json", action="store_true", help="print one JSON object per model")
    models.set_defaults(func=list_models)


def list_models(args) -> int:
    specs = [registry.get_spec(n) for n in args.names] or list(registry.MODELS.values())
    specs = [s for s in specs if args.family in (None, s.family)]

    import keras  # after the name checks: a typo fails fast, without TensorFlow

    from tfyard.models import count_params, create_model, multiply_adds

    if not args.json:
        print(f"{'name':<20} {'family':<9} {'input':<12} {'params':>12}"
              + (f" {'GMACs':>8}" if args.flops else "") + "  description")
    for spec in specs:
        classes = args.num_classes or registry.DEFAULT_NUM_CLASSES[spec.family]
        with keras.StatelessScope():   # shapes alone: no initializer runs (a third less CPU)
            model = create_model(spec.name, classes)
        row = {"name": spec.name, "family": spec.family, "input_shape": list(spec.input_shape),
               "num_classes": classes, "params": count_params(model)}
        if args.flops:
            row["multiply_adds"] = multiply_adds(model)
        del model
        keras.backend.clear_session()
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        size = "x".join(map(str, spec.input_shape))
        macs = f" {row['multiply_adds'] / 1e9:>8.3f}" if args.flops else ""
        print(f"{spec.name:<20} {spec.family:<9} {size:<12} {row['params']:>12,}{macs}  "
              f"{spec.description}", flush=True)
    return 0
