"""Trial processes started ahead of their trials: a spare has imported Python's modules,
TensorFlow and tfyard's training code (~2 s of a trial's start) while the trials before it
trained, and waits for its command line. Where trials leave a core idle (GPU trials, a
machine with cores to spare) the next trial starts training that much sooner; on a machine
the trials fill, the import's CPU is spent beside them instead of before.

A spare is `python -m tfyard.tune.warm`, started as a trial is (its own process group and a
guard that ends it with tune); it reads one line from stdin, the JSON list of a `tfyard`
command line, and runs it as `python -m tfyard` would, with that exit status. Closing its
stdin unused ends it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence

TFYARD = (sys.executable, "-m", "tfyard")
TRAIN = (*TFYARD, "train")   # the commands a spare runs: `tfyard train ...`
SPARE = (sys.executable, "-m", "tfyard.tune.warm")


class Spares:
    """At most one spare ready for the next trial, all with the trials' environment `env`."""

    def __init__(self, env: dict[str, str]):
        self.env = env
        self._ready: list[subprocess.Popen] = []

    def process(self, command: Sequence[str], more: bool) -> subprocess.Popen:
        """A process group running `command`: a spare handed it when it is `tfyard train`
        (not a stand-in, nor a launcher of Ray's), and a new spare made ready when `more`
        trials may follow."""
        from tfyard.launch.local import spawn

        if tuple(command[:len(TRAIN)]) != TRAIN:
            return spawn(command, self.env)
        proc = self._ready.pop() if self._ready else self._spare()
        try:
            proc.stdin.write(json.dumps(list(command[len(TFYARD):])).encode() + b"\n")
            proc.stdin.close()
        except BrokenPipeError:   # it died importing: its exit and output tell the trial's end
            pass
        if more:
            self._ready.append(self._spare())
        return proc

    def close(self) -> None:
        """End the spares no trial took (each exits at its empty stdin; the group goes)."""
        from tfyard.launch.local import stop_group

        for proc in self._ready:
            proc.stdin.close()
            stop_group(proc, grace=5.0)
            proc.stdout.close()
        self._ready = []

    def _spare(self) -> subprocess.Popen:
        from tfyard.launch.local import spawn

        return spawn(SPARE, self.env, stdin=subprocess.PIPE)


def main() -> int:
    """A spare: import what a trial needs, then run the command line tune sends."""
    from tfyard import keras_startup, quiet

    keras_startup.skip_optional_imports()
    quiet.setup()   # before TensorFlow loads, as `tfyard` itself does
    import tfyard.train.build  # noqa: F401  TensorFlow, Keras and the training code
    from tfyard.cli import main as tfyard

    line = sys.stdin.readline()
    return tfyard(json.loads(line)) if line.strip() else 0


if __name__ == "__main__":
    sys.exit(main())
