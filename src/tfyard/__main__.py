"""`python -m tfyard` is the `tfyard` command."""

from tfyard.cli import run

run()
