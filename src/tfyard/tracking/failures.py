"""A failed MLflow request in tfyard's words: what went wrong and what to check.

MLflow's HTTP client wraps every failure in an MlflowException whose text is urllib3's
(`HTTPConnectionPool(host=..., port=...): Max retries exceeded ... NewConnectionError(...)`),
hundreds of characters before the cause. The cause itself is in the exception's chain
(MLflow raises inside an `except`, urllib3 keeps it as `reason`, requests as its argument),
so this module reads the chain rather than the text.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl

URI_HINT = "--mlflow_uri (or MLFLOW_TRACKING_URI)"
RUNNING = f"that the server is running and that {URI_HINT} names its address"
# MLflow's error codes (and the HTTP statuses it maps to them): what they say, what to check.
ANSWERS = {
    "UNAUTHENTICATED": ("it refused the credentials (HTTP 401)",
                        "MLFLOW_TRACKING_TOKEN, or MLFLOW_TRACKING_USERNAME and _PASSWORD"),
    "PERMISSION_DENIED": ("it refused access (HTTP 403)",
                          "that these credentials may write to the experiment"),
    "ENDPOINT_NOT_FOUND": ("it has no MLflow API there (HTTP 404)",
                           f"{URI_HINT}: the server's base address, without /api or /#/"),
    "TEMPORARILY_UNAVAILABLE": ("it is unavailable for now (HTTP 503)", "the server's log"),
    "INTERNAL_ERROR": ("it failed on its side (HTTP 500)", "the server's log"),
}
TEXT_MAX = 200   # the most of a server's own message that is quoted


def said(exc: BaseException) -> tuple[str, str]:
    """(what went wrong, what to check) for `exc`, raised by an MLflow client request."""
    chain = list(_chain(exc))
    if any("Unsupported" in type(link).__name__ and "URI" in type(link).__name__
           for link in chain):   # MLflow has no store for the scheme
        return ("MLflow takes no such URI", f"{URI_HINT}: http(s)://HOST:PORT of a server, "
                "a local path or file:DIR, or a database such as sqlite:///FILE")
    if _has(chain, ConnectionRefusedError):
        return "nothing answers there (connection refused)", RUNNING
    if _has(chain, socket.gaierror):
        return "its host name does not resolve", f"the host name in {URI_HINT}"
    if _has(chain, TimeoutError, socket.timeout) or any(
            "Timeout" in type(link).__name__ for link in chain):
        wait = os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT", "120")
        return (f"it did not answer within {wait} s",
                "the server and the network (MLFLOW_HTTP_REQUEST_TIMEOUT sets the wait)")
    if _has(chain, ssl.SSLError):
        return ("its TLS handshake failed", "the https address, and REQUESTS_CA_BUNDLE for a "
                "private certificate authority")
    if _has(chain, ConnectionError, http.client.HTTPException) or any(
            type(link).__name__ == "ProtocolError" for link in chain):
        return "it dropped the connection", RUNNING
    unreachable = next((link for link in chain if isinstance(link, OSError) and link.strerror),
                       None)
    if unreachable is not None:
        return f"it cannot be reached ({unreachable.strerror.lower()})", RUNNING
    if getattr(exc, "error_code", None) in ANSWERS:
        return ANSWERS[exc.error_code]
    return _first_words(getattr(exc, "message", None) or str(exc), type(exc).__name__), \
        f"{URI_HINT} and the server's log"


def _chain(exc: BaseException):
    """`exc` and every exception it wraps, each once."""
    seen, todo = set(), [exc]
    while todo:
        link = todo.pop(0)
        if not isinstance(link, BaseException) or id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        todo += [link.__cause__, link.__context__, getattr(link, "reason", None), *link.args]


def _has(chain: list, *kinds) -> bool:
    return any(isinstance(link, kinds) for link in chain)


def _first_words(text: str, kind: str) -> str:
    """The first line of `text`, cut at a word's end when it is long."""
    line = text.strip().splitlines()[0] if text.strip() else kind
    if len(line) > TEXT_MAX:
        line = line[:TEXT_MAX].rsplit(" ", 1)[0] + " ..."
    return f"it answered: {line}"
