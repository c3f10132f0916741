"""`python -m tfyard.cli.forkserver`: the warm server tune forks its trials from
(`launch.forked`). It imports Python's modules, TensorFlow, Keras, tfyard's training code
and every command's parser once; each request it forks runs `tfyard train` with the flags
it was given, as `python -m tfyard train` would, with that command's output and exit
status."""

from __future__ import annotations

import os
import sys


def main() -> None:
    from tfyard import cli

    # a trial's end runs last, after the exit handlers of the modules imported below, as in
    # a plain `tfyard train` (registered in its child, it would run before them, and end
    # the process without them)
    status = cli.ends_last()
    from tfyard import keras_startup, quiet

    keras_startup.skip_optional_imports()
    quiet.setup()   # before TensorFlow loads, as `tfyard` itself does
    import tfyard.train.build  # noqa: F401  TensorFlow, Keras and the training code
    import tfyard.train.job  # noqa: F401
    from tfyard.launch import forked

    cli.build_parser()   # imports every command's module

    def run(argv: list[str]) -> None:
        quiet.after_fork()   # the child's stderr is its own: quiet it as `tfyard` does
        sys.argv[1:] = ["train", *argv]
        cli.run(status)

    forked.serve(run)
    os._exit(0)   # no teardown of TensorFlow's modules: tune waits for this exit


if __name__ == "__main__":
    main()
