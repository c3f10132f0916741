"""A loopback HTTP proxy in front of the S3 server, for faults a real network has: it passes
each request on, holds every request until released (a stalled link), or drops each
connection unanswered (a store that is down). In front of gcp-storage-emulator it can also
give the emulator what GCS has and it lacks, generation preconditions (`GcsPreconditions`),
so that a run in a bucket (which needs them for its lease) can be tested on gs:// too."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit


def pass_on(target: str, command: str, path: str, body: bytes = b"", headers=None):
    """`command path` sent to the server at `target` (HOST:PORT): its answer, read whole."""
    upstream = http.client.HTTPConnection(target, timeout=60)
    try:
        upstream.request(command, path, body=body, headers=headers or {})
        answer = upstream.getresponse()
        return answer, answer.read()
    finally:
        upstream.close()


class GcsPreconditions:
    """What GCS does with `ifGenerationMatch` and gcp-storage-emulator does not: a request
    naming a generation other than the object's (0: none) is refused with 412, as real GCS
    refuses it, checked and passed on under one lock (so two conditional writes cannot both
    see the same generation). The objects and their generations stay the emulator's."""

    def __init__(self, target: str):
        self.target = target
        self.serial = threading.Lock()

    def condition(self, path: str) -> int | None:
        wanted = parse_qs(urlsplit(path).query).get("ifGenerationMatch")
        return int(wanted[0]) if wanted else None

    def holds(self, path: str, body: bytes) -> bool:
        """Whether the object `path` (with `body`, an upload's) names has the generation
        its condition asks for."""
        bucket, name = named(path, body)
        answer, data = pass_on(self.target, "GET",
                               f"/storage/v1/b/{bucket}/o/{quote(name, safe='')}")
        current = int(json.loads(data)["generation"]) if answer.status == 200 else 0
        return current == self.condition(path)


def named(path: str, body: bytes) -> tuple[str, str]:
    """The bucket and object of a JSON-API request: in its path (reads, deletes, metadata),
    else in the upload's metadata (a multipart upload's first part, a resumable one's
    body)."""
    url = urlsplit(path)
    bucket, _, name = url.path.split("/b/", 1)[1].partition("/o")
    if name.startswith("/"):
        return bucket, unquote(name[1:])
    given = parse_qs(url.query).get("name")
    if given:
        return bucket, given[0]
    if body.startswith(b"--"):   # multipart/related: the metadata part, then the data's
        body = body.split(b"\r\n\r\n", 1)[1].split(b"\r\n--", 1)[0]
    return bucket, json.loads(body)["name"]


PRECONDITION_FAILED = json.dumps({"error": {
    "code": 412, "message": "At least one of the pre-conditions you specified did not hold.",
    "errors": [{"reason": "conditionNotMet", "domain": "global",
                "message": "Precondition Failed"}]}}).encode()


class StoreProxy:
    def __init__(self, target: str, generations: bool = False):
        """`generations`: the target is gcp-storage-emulator, given GCS's preconditions."""
        self.target = urlsplit(target).netloc
        self.preconditions = GcsPreconditions(self.target) if generations else None
        self.open = threading.Event()   # cleared: requests wait (held)
        self.open.set()
        self.down = False
        self.requests: list[str] = []   # "METHOD /bucket/key" of each request passed on
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_args):
                pass

            def _forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                proxy.open.wait()
                if proxy.down:
                    self.close_connection = True
                    return
                proxy.requests.append(f"{self.command} {self.path.split('?')[0]}")
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                checked = proxy.preconditions
                if checked is None or checked.condition(self.path) is None:
                    self._answer(*pass_on(proxy.target, self.command, self.path, body, headers))
                    return
                with checked.serial:
                    if not checked.holds(self.path, body):
                        self._refuse()
                        return
                    answered = pass_on(proxy.target, self.command, self.path, body, headers)
                self._answer(*answered)

            def _refuse(self):
                self.send_response(412, "Precondition Failed")
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(PRECONDITION_FAILED)))
                self.end_headers()
                self.wfile.write(PRECONDITION_FAILED)

            def _answer(self, answer, data):
                self.send_response(answer.status, answer.reason)
                skipped = ("transfer-encoding", "connection", "date", "server") + (
                    () if self.command == "HEAD" else ("content-length",))
                for key, value in answer.getheaders():
                    if key.lower() not in skipped:
                        self.send_header(key, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass   # a client killed mid-request (what the tests do) is no news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def hold(self) -> None:
        self.open.clear()

    def release(self) -> None:
        self.down = False
        self.open.set()

    def stop(self) -> None:
        """The store is down: every request from now on is dropped unanswered."""
        self.down = True
        self.open.set()

    def close(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()
