"""Tune's tests run most studies with a stand-in for `tfyard train` (tests/tune/stand_in.py):
the scheduling, pruning, failures and resume of the real search loop, without TensorFlow."""

from __future__ import annotations

import json
import sys
from pathlib import Path

STAND_IN = (sys.executable, str(Path(__file__).with_name("stand_in.py")))
ROOT = Path(__file__).resolve().parents[2]
# `tfyard tune ARGV` with stand-in trials in a process of its own: for a tune killed outside.
TUNE_CODE = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); "
             "from tests.tune.conftest import tune; tune(*sys.argv[1:])")


def write_space(directory: Path, space: dict | str) -> str:
    path = directory / ("space.yaml" if isinstance(space, str) else "space.json")
    path.write_text(space if isinstance(space, str) else json.dumps(space))
    return str(path)


def tune(*argv) -> dict:
    """Run `tfyard tune ARGV` here with stand-in trials; tune.json's content."""
    from tfyard.cli import build_parser
    from tfyard.cli.tune import search
    from tfyard.tune.search import run

    args, rest = build_parser().parse_known_args(["tune", *map(str, argv)])
    args.train_argv = rest
    return run(search(args, STAND_IN))


def eval_records(run_dir) -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]
