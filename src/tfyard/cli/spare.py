"""`python -m tfyard.cli.spare`: a `tfyard` process started before its command line is
known (tune's spare trial process, `tune.trial.Spares`). It imports Python's modules,
TensorFlow and tfyard's training code, then reads one line from stdin, the JSON list of a
`tfyard` command line, and runs it as `python -m tfyard` would, with that exit status; an
empty stdin ends it."""

from __future__ import annotations

import json
import sys


def main() -> None:
    from tfyard import keras_startup, quiet

    keras_startup.skip_optional_imports()
    quiet.setup()   # before TensorFlow loads, as `tfyard` itself does
    import tfyard.train.build  # noqa: F401  TensorFlow, Keras and the training code
    from tfyard import cli

    line = sys.stdin.readline()
    if not line.strip():
        return
    sys.argv[1:] = json.loads(line)
    cli.run()


if __name__ == "__main__":
    main()
