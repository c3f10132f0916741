"""The training loop and everything it writes. `run(argv)` is the seed scripts' entry point."""


def run(argv: list[str] | None = None, prog: str = "tfyard train") -> int:
    """Parse a training command line (classic spellings included) and train."""
    from tfyard import quiet
    from tfyard.distribute.coordination import end_together
    from tfyard.train.job import run as run_job

    quiet.setup()  # TensorFlow's C++ log lines off stderr (tfyard/quiet/)
    status = run_job(argv, prog=prog)
    end_together()  # all-reduce members leave together (distribute/coordination.py)
    return status
