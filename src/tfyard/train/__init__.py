"""The training loop and everything it writes. `run(argv)` is the seed scripts' entry point."""


def run(argv: list[str] | None = None, prog: str = "tfyard train") -> int:
    """Parse a training command line (classic spellings included) and train."""
    from tfyard.train.job import run as run_job

    return run_job(argv, prog=prog)
