"""`tfyard bench train|data|scaling`: images/sec of the real loop, the input pipeline, scaling."""

from __future__ import annotations

import json

from tfyard import platform
from tfyard.dtypes import AUTO
from tfyard.errors import UserError
from tfyard.flags.declared import flag_type, positive_int
from tfyard.train.options import add_option_arguments

_STEPS_PER_LOOP = 10
# The TrainOptions fields a benchmark run takes, declared (spellings, checks) there once.
RUN_OPTIONS = ("model", "dataset", "image_size", "dtype", "jit_compile", "steps_per_loop",
               "data_threads")
_INT = flag_type(positive_int)


def _add_run_arguments(parser, model: str) -> None:
    """Flags shared by `bench train` and `bench scaling` (passed on to each member)."""
    add_option_arguments(parser, RUN_OPTIONS, defaults={
        "model": model, "steps_per_loop": _STEPS_PER_LOOP}, helps={
        "dataset": "the dataset benched on, or shaped like with --data synthetic (default: "
        "the model family's: cifar10 for cifar_*, mnist for mnist_*, else imagenet)",
        "image_size": "square input size (default: the model's)"})
    parser.add_argument("--data", default="synthetic",
                        help="`synthetic` (random batches shaped like --dataset, made on the "
                        "device) or a directory of --dataset files")
    platform.add_platform_flag(
        parser, "work_dir", help="where the record counts of --data are cached (env "
        "TFYARD_WORK_DIR; default: a temporary directory, removed at the end: a benchmark "
        "writes nothing where it runs)")
    parser.add_argument("--steps", type=_INT, default=50, help="timed steps")
    parser.add_argument("--warmup_steps", type=int, default=2 * _STEPS_PER_LOOP,
                        help="steps run first and not timed (tracing, autotuning)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _options(args, **changes):
    """The TrainOptions a benchmark member runs with."""
    from tfyard.data.formats.synthetic import twin
    from tfyard.train.options import options_from_args

    synthetic = args.data == "synthetic"
    return options_from_args(args, dataset=twin(args.dataset) if synthetic else args.dataset,
                             data_dir=None if synthetic else args.data, export=False,
                             **changes)


def register(commands) -> None:
    bench = commands.add_parser("bench", help="measure training, input and scaling throughput")
    sub = bench.add_subparsers(dest="bench_command", metavar="SUBCOMMAND",
                               parser_class=type(bench))
    train = sub.add_parser(
        "train", help="images/sec, step time and peak memory of the tfyard training loop",
        description="Train on this machine (or as a cluster member under TF_CONFIG) and print "
        "the median images/sec over windows of --steps_per_loop steps, warm-up excluded.")
    _add_run_arguments(train, "resnet50")
    batch = train.add_mutually_exclusive_group()
    add_option_arguments(batch, ("batch_size", "per_replica_batch_size"), grouped=False)
    platform.add_platform_flag(train, "num_gpus")
    train.add_argument("--pin_cpu", action="store_true",
                       help="pin this process to one core (its cluster place), one TF thread")
    train.add_argument("--profile", metavar="DIR", default=None,
                       help="write a TensorFlow profiler trace of the run to DIR (TensorBoard)")
    train.set_defaults(func=_train)

    data = sub.add_parser("data", help="images/sec of the input pipeline alone")
    add_option_arguments(data, ("dataset", "batch_size", "image_size", "dtype", "data_threads",
                                "data_cache_limit"),
                         defaults={"dataset": "imagenet", "batch_size": 64, "dtype": "float32"},
                         helps={"dataset": "the registry dataset whose input is timed",
                                "batch_size": "images per batch",
                                "data_cache_limit": "local disk that --data_dir in a bucket "
                                "may take in tfyard's cache ($XDG_CACHE_HOME/tfyard, else "
                                "~/.cache/tfyard): 500MB or 500MiB; a larger TFRecord set "
                                "streams through it as training reads it (default: "
                                "TFYARD_DATA_CACHE_LIMIT, else half that disk's free "
                                "space)"})
    platform.add_platform_flag(data, "data_dir", help="its files")
    data.add_argument("--windows", type=_INT, default=5, help="timed windows")
    data.add_argument("--window_batches", type=_INT, default=10)
    data.add_argument("--warmup_batches", type=int, default=5)
    data.add_argument("--json", action="store_true", help="print one JSON object")
    data.set_defaults(func=_data)

    scaling = sub.add_parser(
        "scaling", help="images/sec on 1..N GPUs (or pinned CPU workers) and efficiency",
        description="Run `bench train` on 1, 2, ... N GPUs; on a CPU-only machine on 1..N "
        "worker processes, one pinned per core, all-reducing over loopback.")
    _add_run_arguments(scaling, "cifar_resnet20")
    scaling.add_argument("--max_gpus", type=_INT, required=True,
                         help="largest number of GPUs (or CPU workers) to measure")
    add_option_arguments(scaling, ("per_replica_batch_size",),
                         defaults={"per_replica_batch_size": 64})
    scaling.set_defaults(func=_scaling)
    bench.set_defaults(func=lambda args: bench.print_help() or 2)


def _check_names(args) -> None:
    """Unknown names and a missing --data directory are refused before TensorFlow loads;
    the dataset follows the model's family unless given (`_fit_dataset`)."""
    from tfyard.data import reader

    _fit_dataset(args)
    reader(args.dataset)
    if args.data != "synthetic":
        platform.resolve(data_dir=args.data, create=False)


def _fit_dataset(args) -> None:
    """Set args.dataset to what the model is benched on: its family's when none is given.
    A dataset whose images are another size than the model's is refused unless
    --image_size says which (a CIFAR model at ImageNet's 224 px and 1,000 classes ran 17
    minutes in 5.7 GB)."""
    from tfyard.data.formats import canonical
    from tfyard.data.formats.synthetic import SHAPES
    from tfyard.models import get_spec
    from tfyard.models.registry import FAMILY_DATASET

    spec = get_spec(args.model)
    own = FAMILY_DATASET[spec.family]
    if args.dataset is None:
        args.dataset = own
        return
    side, model_side = SHAPES.get(canonical(args.dataset), (None,))[0], spec.input_shape[0]
    if args.image_size is None and side is not None and side != model_side:
        raise UserError(f"{spec.name} takes {model_side}x{model_side} images but "
                        f"{args.dataset} holds {side}x{side}; leave --dataset out to bench it "
                        f"on {own}, or pass --image_size to bench it at that size anyway")


def _train(args) -> int:
    _check_names(args)
    if args.pin_cpu:
        from tfyard.bench.train import pin_to_core

        pin_to_core()
    from tfyard.bench.train import measure

    options = _options(args, train_steps=args.steps, num_gpus=args.num_gpus,
                       **({"data_threads": 1} if args.pin_cpu else {}))
    result = measure(options, args.warmup_steps, args.profile)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"bench train: {result['model']} on {result['data']} {result['image_size']}px, "
          f"{result['dtype']} ({result['dtype_reason']}), "
          f"XLA {'on' if result['jit_compile'] else 'off'}, "
          f"{result['strategy']} x{result['replicas']}, global batch {result['global_batch']}, "
          f"{result['devices']}")
    print(f"  images/sec   {result['images_per_sec']:10.1f}  (median of {result['windows']} "
          f"windows of {result['steps_per_loop']} steps; {result['warmup_steps']} warm-up "
          "steps excluded)")
    print(f"  step time    {result['step_time_ms']:10.1f} ms")
    print(f"  peak memory  {result['peak_memory_bytes'] / 2**20:10.1f} MiB "
          f"({result['peak_memory_of']})")
    _print_flops(result)
    return 0


def _print_flops(result: dict) -> None:
    """The FLOPs lines of `bench train`: a step's count, the rate reached, the peak."""
    if not result["flops_per_step"]:
        print(f"  FLOPs/step   {'?':>10}  ({result['flops_how']})")
        return
    print(f"  FLOPs/step   {result['flops_per_step'] / 1e9:10.1f} G  ({result['flops_how']})")
    achieved = result["achieved_flops_per_sec"] / 1e9
    if result["peak_fraction"] is None:
        print(f"  achieved     {achieved:10.1f} GFLOP/s; peak unknown ({result['peak_how']})")
        return
    print(f"  achieved     {achieved:10.1f} GFLOP/s = {result['peak_fraction']:.1%} of "
          f"{result['peak_flops_per_sec'] / 1e9:.0f} GFLOP/s peak ({result['peak_how']})")


def _data(args) -> int:
    from tfyard.data import reader

    reader(args.dataset)  # an unknown name or a missing --data_dir, before TensorFlow
    platform.resolve(data_dir=args.data_dir, create=False)
    from tfyard.bench.data import measure
    from tfyard.process import envvars

    limit = args.data_cache_limit or envvars.size("TFYARD_DATA_CACHE_LIMIT")
    dtype = args.dtype
    if dtype == AUTO:
        from tfyard.train.build import machine_dtype

        dtype = machine_dtype(platform.resolve(create=False).num_gpus).dtype
    result = measure(args.dataset, args.data_dir, args.batch_size, args.image_size,
                     args.windows, args.window_batches, args.warmup_batches,
                     args.data_threads, dtype, limit)
    if args.json:
        print(json.dumps(result, sort_keys=True))
        return 0
    print(f"bench data: {result['dataset']} from {result['data']}, batch "
          f"{result['batch_size']}, {result['image_size']}px {result['dtype']}")
    print(f"  images/sec   {result['images_per_sec']:10.1f}  (median of {result['windows']} "
          f"windows of {result['window_batches']} batches; {result['warmup_batches']} "
          "warm-up batches excluded)")
    return 0


def member_args(args) -> list[str]:
    """The `bench train` flags each scaling member runs with."""
    _fit_dataset(args)
    options = _options(args, per_replica_batch_size=args.per_replica_batch_size)
    return ["--data", args.data, "--dataset", args.dataset, "--model", args.model,
            "--steps", str(args.steps), "--warmup_steps", str(args.warmup_steps),
            *(["--work_dir", args.work_dir] if args.work_dir else []),
            "--steps_per_loop", str(options.steps_per_loop),
            *options.to_argv(("image_size", "dtype", "jit_compile", "data_threads",
                              "per_replica_batch_size"))]


def _scaling(args) -> int:
    _check_names(args)
    from tfyard.bench.scaling import measure

    def show(row):
        if not args.json:
            print(f"  {row['devices']:>7}  {row['images_per_sec']:12.1f}  "
                  f"{row['step_time_ms']:10.1f}  {row['efficiency']:10.0%}", flush=True)

    if not args.json:
        print(f"bench scaling: {args.model}, {args.per_replica_batch_size} per device")
        print(f"  {'devices':>7}  {'images/sec':>12}  {'step ms':>10}  {'efficiency':>10}",
              flush=True)
    result = measure(member_args(args), args.max_gpus, show)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print(f"  devices: {result['device']}")
    return 0
