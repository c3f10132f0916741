"""Shared by the launcher tests: start `tfyard launch ...`, find what members recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROGRAMS = Path(__file__).parent / "programs"


def launch(*args, **popen) -> subprocess.Popen:
    """Start `python -m tfyard launch ARGS` with output captured as text."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "tfyard", "launch", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, **popen)


def program(name: str, *args) -> list[str]:
    return [sys.executable, str(PROGRAMS / name), *map(str, args)]


def recorded_pids(pid_dir: Path) -> dict[str, list[int]]:
    """member -> the pids it wrote (its own, then any grandchild's)."""
    return {p.stem: [int(x) for x in p.read_text().split()] for p in pid_dir.glob("*.pids")}


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie nobody reaped yet counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state not in ("Z", "X")


def follow(proc: subprocess.Popen) -> list[str]:
    """Lines of `proc`'s output as they come, read by a daemon thread into the returned list."""
    import threading

    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def started_pid(lines: list[str], member: str) -> int | None:
    """The pid of the latest start of `member` that the launcher announced, if any."""
    prefix = f"tfyard: started {member} (pid "
    pids = [int(line[len(prefix):].split(")")[0]) for line in list(lines)
            if line.startswith(prefix)]
    return pids[-1] if pids else None


def fit_user_model(argv, ctx):
    """A user's main_fun for `tfyard.spark.run` and `tfyard.ray.run`: hand their own model,
    which each member imports from the user's directory, to tfyard.fit, which takes its role
    from the TF_CONFIG the launcher set. (Pickled by value: the members need not import it.)"""
    import tfyard

    model, image_size, out, work = argv
    tfyard.fit(model, "digits", output_dir=out, work_dir=work, image_size=int(image_size),
               train_steps=6, batch_size=32, steps_per_loop=3, num_gpus="0", seed=1,
               jit_compile=False, quiet=True, export=False)
