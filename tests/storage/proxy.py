"""A loopback HTTP proxy in front of the S3 server, for faults a real network has: it passes
each request on, holds every request until released (a stalled link), or drops each
connection unanswered (a store that is down)."""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class StoreProxy:
    def __init__(self, target: str):
        self.target = urlsplit(target).netloc
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
                upstream = http.client.HTTPConnection(proxy.target, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "expect"}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
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
                upstream.close()

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
