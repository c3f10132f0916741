import time


def until(check, seconds: float = 20.0) -> bool:
    """Whether `check()` came true within `seconds` (polled every 10 ms)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
