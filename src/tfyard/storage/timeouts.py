"""How long tfyard waits on a store. Two settings, so that a store that never answers is named
in seconds while a running training still rides out an outage:

- `TFYARD_STORE_REQUEST_TIMEOUT` (seconds, default 15): one request's connect and read
  timeouts. A request failing for a transient reason is tried ATTEMPTS times in all, so a
  silent endpoint is one line within about a minute.
- `TFYARD_STORE_TIMEOUT` (seconds, default 300): how long a running training tolerates a
  store that stays away. It bounds every request as well (ATTEMPTS of them fit in it), so a
  small value holds at start too.
"""

from __future__ import annotations

from tfyard.errors import UserError
from tfyard.process import envvars

REQUEST_ENV, REQUEST_S = "TFYARD_STORE_REQUEST_TIMEOUT", 15.0
OUTAGE_ENV, OUTAGE_S = "TFYARD_STORE_TIMEOUT", 300.0
ATTEMPTS = 3   # tries of one request, the first included
CONNECT_S = 5.0


def outage_seconds() -> float:
    """How long a running training tolerates a store that keeps failing."""
    return envvars.number(OUTAGE_ENV, OUTAGE_S)


def request_seconds() -> float:
    """One try's connect and read timeout."""
    given = envvars.number(REQUEST_ENV, REQUEST_S)
    if given <= 0:
        raise UserError(f"{REQUEST_ENV}={given:g} is not a positive number of seconds; set it "
                        f"to one such as {REQUEST_S:g} or unset it")
    outage = outage_seconds()
    return min(given, outage / ATTEMPTS) if outage > 0 else given


def connect_seconds() -> float:
    return min(CONNECT_S, request_seconds())
