"""The classic scaling table: images/sec on 1..N devices and the efficiency against one.

On a GPU host each row is `tfyard bench train --num_gpus n` (MirroredStrategy) in a fresh
process. On a CPU-only host each row is n worker processes, each pinned to its own core
with one TensorFlow thread, training with MultiWorkerMirrored over loopback via
`tfyard launch local`. The per-replica batch is fixed (weak scaling).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable

from tfyard.errors import UserError
from tfyard.launch.local import run_local
from tfyard.platform import visible_gpus
from tfyard.process.cpus import usable_cpus


def member_command(train_args: list[str], pin_cpu: bool) -> list[str]:
    pin = ["--pin_cpu"] if pin_cpu else []
    return [sys.executable, "-m", "tfyard", "bench", "train", "--json", *pin, *train_args]


def _result(lines: Iterable[str], what: str, log: list[str]) -> dict:
    """The JSON object a member printed last."""
    for line in reversed(list(lines)):
        if line.startswith("{"):
            return json.loads(line)
    sys.stderr.write("".join(log))
    raise UserError(f"{what} printed no result; its output is above")


def _on_gpus(n: int, train_args: list[str]) -> dict:
    proc = subprocess.run(member_command([*train_args, "--num_gpus", str(n)], False),
                          capture_output=True, text=True,
                          env={"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ})
    what = f"the run on {n} GPU(s)"
    if proc.returncode:
        sys.stderr.write(proc.stderr)
        raise UserError(f"{what} failed with exit code {proc.returncode}; its output is above")
    return _result(proc.stdout.splitlines(), what, [proc.stderr])


def _on_cpu_workers(n: int, train_args: list[str]) -> dict:
    log: list[str] = []
    outcome = run_local(member_command(train_args, True), workers=n, write=log.append)
    what = f"the run with {n} pinned worker(s)"
    if outcome.returncode:
        sys.stderr.write("".join(log))
        raise UserError(f"{what} failed: {outcome.message}; its output is above")
    prefix = "[worker:0] "
    return _result((line[len(prefix):].strip() for line in log if line.startswith(prefix)),
                   what, log)


def measure(train_args: list[str], max_devices: int,
            progress: Callable[[dict], None] = lambda row: None) -> dict:
    """Rows of {devices, images_per_sec, step_time_ms, global_batch, efficiency} for 1..N."""
    gpus = visible_gpus()
    if gpus:
        if max_devices > gpus:
            raise UserError(f"--max_gpus {max_devices} but only {gpus} GPU(s) are visible; "
                            f"use --max_gpus {gpus} or less")
        run, device = _on_gpus, "GPU"
    else:
        cores = len(usable_cpus())
        if max_devices > cores:
            raise UserError(f"--max_gpus {max_devices}: no GPU here, so workers are pinned one "
                            f"per CPU core, but only {cores} core(s) are available; use "
                            f"--max_gpus {cores} or less")
        run, device = _on_cpu_workers, "CPU core (one pinned worker process each)"
    rows, first = [], None
    for n in range(1, max_devices + 1):
        result = run(n, train_args)
        first = first or result
        rate = result["images_per_sec"]
        row = {"devices": n, "images_per_sec": rate, "step_time_ms": result["step_time_ms"],
               "global_batch": result["global_batch"], "strategy": result["strategy"],
               "efficiency": rate / (n * first["images_per_sec"])}
        rows.append(row)
        progress(row)
    return {"device": device, "model": first["model"], "data": first["data"],
            "image_size": first["image_size"], "dtype": first["dtype"],
            "jit_compile": first["jit_compile"], "per_replica_batch": first["per_replica_batch"],
            "rows": rows}
