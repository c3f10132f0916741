"""The platform contract: where data is read, where results go, how many GPUs to use.

Every training entry point takes `--data_dir --output_dir --work_dir --log_dir --num_gpus`
(dashes accepted too), each falling back to `TFYARD_<NAME>` and then to a default. A
platform can therefore run any script with these arguments. No TensorFlow import here:
`tfyard --help` must stay fast.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict, dataclass

from tfyard import storage
from tfyard.errors import UserError
from tfyard.flags import OUTPUT_FLAG, rename_flags
from tfyard.runfiles.files import files_for
from tfyard.runfiles.layout import LOGS, WORK

FLAGS = ("data_dir", "output_dir", "work_dir", "log_dir", "num_gpus")
MAX_STEPS = "TFYARD_MAX_STEPS"

_HELP = {
    "data_dir": "where the input data lives: a directory, or s3:// or gs://BUCKET/PREFIX (copied "
    "to --work_dir first; tfyard[cloud]) (env TFYARD_DATA_DIR; default: none, the dataset decides)",
    "output_dir": "where checkpoints, logs, metrics and exports go: a directory, or "
    "s3:// or gs://BUCKET/PREFIX (written to a copy under --work_dir, uploaded in the background; "
    "tfyard[cloud]) (env TFYARD_OUTPUT_DIR; default: ./output)",
    "work_dir": "local scratch space for caches, temporary files and the copy of a run in a "
    "bucket (env TFYARD_WORK_DIR; default: <output_dir>/work, or ~/.cache/tfyard/work/... "
    "for a run in a bucket)",
    "log_dir": "TensorBoard summaries (env TFYARD_LOG_DIR; default: <output_dir>/logs)",
    "num_gpus": "GPUs to train on (env TFYARD_NUM_GPUS; default: all visible)",
}


@dataclass(frozen=True)
class Platform:
    """Resolved platform directories and GPU count for one process."""

    data_dir: str | None
    output_dir: str
    work_dir: str
    log_dir: str
    num_gpus: int
    # For a run in a bucket: its URL, whose local copy `output_dir` is (under `work_dir`).
    output_url: str | None = None

    def as_dict(self) -> dict:
        """The fields as run.json records them: a run in a bucket by its URL, and its local
        copy (`output_copy`: None for a run on disk, so both places record the same keys)."""
        fields = asdict(self)
        url, fields["output_copy"] = fields.pop("output_url"), None
        if url is not None:
            fields["output_copy"], fields["output_dir"] = fields["output_dir"], url
        return fields


def max_steps(environ=None) -> int | None:
    """TFYARD_MAX_STEPS, a cap on every run's training steps: a full-length command (a docs
    page's, a script's) runs short as written; None where it is unset."""
    value = (os.environ if environ is None else environ).get(MAX_STEPS, "")
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"{MAX_STEPS} must be a whole number of at least 1, got {value!r}")
    return int(value)


def is_remote(path: str) -> bool:
    """True for a path with a scheme (s3://, gs://, hdfs://): `tfyard.storage` says where
    it lives."""
    return storage.scheme_of(path) is not None


def visible_gpu_ids() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them, found without
    importing TensorFlow."""
    cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cuda is not None:
        ids = [d.strip() for d in cuda.split(",")]
        return ids[:next((i for i, d in enumerate(ids) if not d or d.startswith("-")),
                         len(ids))]   # CUDA stops at the first invalid entry
    try:
        return [str(i) for i in range(len(os.listdir("/proc/driver/nvidia/gpus")))]
    except OSError:
        return []


def visible_gpus() -> int:
    """How many GPUs this process may use, found without importing TensorFlow."""
    return len(visible_gpu_ids())


def _parse_gpus(value, source: str) -> int:
    try:
        count = int(value)
    except (TypeError, ValueError):
        raise UserError(
            f"{source}={value!r} is not a whole number; give a GPU count such as 0 or 4"
        ) from None
    if count < 0:
        raise UserError(f"{source}={count} is negative; give 0 for CPU or a positive GPU count")
    return count


def check_data_dir(data: str | None, source: str = "--data_dir") -> None:
    """A data dir that cannot be read refused before any work (`tfyard tune` checks its
    trials' own before the first starts): a local folder that is missing, a malformed URL or
    an unknown scheme."""
    if data is not None and is_remote(data):
        storage.location(data, source)
    elif data is not None and not os.path.isdir(data):
        raise UserError(f"{source} {data!r} does not exist; point it at your dataset directory")


def resolve(
    data_dir: str | None = None,
    output_dir: str | None = None,
    work_dir: str | None = None,
    log_dir: str | None = None,
    num_gpus: int | str | None = None,
    environ=None,
    create: bool = True,
) -> Platform:
    """Apply flag > environment > default for each field; create local output dirs."""
    env = os.environ if environ is None else environ

    def pick(value, name):
        if value not in (None, ""):
            return value
        return env.get(f"TFYARD_{name.upper()}") or None

    data = pick(data_dir, "data_dir")
    output = pick(output_dir, "output_dir") or "output"
    work, logs = pick(work_dir, "work_dir"), pick(log_dir, "log_dir")
    url = None
    if storage.in_bucket(output, OUTPUT_FLAG):
        url, given, work = output, work, _local_work(output, work)
        output = storage.run_copy(url, given)
        logs = _in_run_copy(logs, url, output)
    work = work or _join(output, WORK)
    logs = logs or _join(output, LOGS)
    gpus_raw = pick(num_gpus, "num_gpus")
    if gpus_raw is None:
        gpus = visible_gpus()
    else:
        source = "--num_gpus" if num_gpus not in (None, "") else "TFYARD_NUM_GPUS"
        gpus = _parse_gpus(gpus_raw, source)
    check_data_dir(data, "--data_dir" if data_dir not in (None, "") else "TFYARD_DATA_DIR")
    storage.refuse_bucket(logs, "--log_dir", "a log dir apart from its run cannot be written to")
    platform = Platform(
        data_dir=_absolute(data) if data else None,
        output_dir=_absolute(output),
        work_dir=_absolute(work),
        log_dir=_absolute(logs),
        num_gpus=gpus,
        output_url=url,
    )
    if create:
        for path in (platform.output_dir, platform.work_dir, platform.log_dir):
            files_for(path).make_directory(path)
    return platform


def _local_work(url: str, work: str | None) -> str:
    """The work dir of a run in a bucket: local disk, the given one or one for that URL."""
    if work is not None and is_remote(work):
        raise UserError(f"--work_dir {work}: the work dir is local scratch space (it holds the "
                        f"copy of {url} being written); give a local directory")
    return work or storage.default_work(url)


def _in_run_copy(logs: str | None, url: str, copy: str) -> str | None:
    """--log_dir for a run in a bucket: a local path, or a place inside the run (its copy)."""
    if logs is None or not is_remote(logs):
        return logs
    inside = os.path.relpath(logs.rstrip("/") + "/", url.rstrip("/") + "/")
    if inside.startswith("..") or storage.scheme_of(inside) is not None:
        raise UserError(f"--log_dir {logs}: a log dir in a bucket must be inside --output_dir "
                        f"{url} (or leave it out: {url}/logs)")
    return os.path.join(copy, inside)


def _join(base: str, name: str) -> str:
    return base.rstrip("/") + "/" + name if is_remote(base) else os.path.join(base, name)


def _absolute(path: str) -> str:
    return path if is_remote(path) else os.path.abspath(os.path.expanduser(path))


# --- argparse -----------------------------------------------------------------------


def spellings(name: str) -> tuple[str, str]:
    """A platform flag's two spellings: `--data_dir` and `--data-dir`."""
    return f"--{name}", "--" + name.replace("_", "-")


def add_platform_flag(parser, name: str, **settings):
    """Add platform flag `name` to an argparse parser (or group); `settings` (required,
    default, a help saying what this command does with it) override the contract's."""
    return parser.add_argument(*spellings(name), dest=name,
                               **{"default": None, "help": _HELP[name], **settings})


def add_platform_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the five platform flags (underscore and dash spellings) to an argparse parser."""
    group = parser.add_argument_group("platform")
    for name in FLAGS:
        add_platform_flag(group, name)
    return parser


def from_args(args: argparse.Namespace, create: bool = True) -> Platform:
    """Resolve the platform from parsed argparse flags (see add_platform_arguments)."""
    return resolve(**{name: getattr(args, name, None) for name in FLAGS}, create=create)


# --- absl -----------------------------------------------------------------------------


def define_absl_flags(flag_values=None) -> None:
    """Define the platform flags as absl flags (call once, before app.run)."""
    from absl import flags

    target = flags.FLAGS if flag_values is None else flag_values
    for name in FLAGS:
        if name not in target:
            flags.DEFINE_string(name, None, _HELP[name], flag_values=target)


def normalize_argv(argv: list[str]) -> list[str]:
    """Rewrite `--data-dir` style platform flags to `--data_dir` so absl accepts both."""
    return rename_flags(argv, {dashed: plain for plain, dashed in map(spellings, FLAGS)})


def from_absl(flag_values=None, create: bool = True) -> Platform:
    """Resolve the platform from absl flags defined by define_absl_flags."""
    from absl import flags

    source = flags.FLAGS if flag_values is None else flag_values
    return resolve(**{name: source[name].value for name in FLAGS}, create=create)
