"""A file server on 127.0.0.1 that honours ``Range`` and counts what it answers: requests (GET and HEAD) and body
bytes. Imported by the read-counter tests; ``python counted_http.py FOLDER`` serves a folder's files in a process
of its own (so a script that forks has no server thread), prints its address, and answers ``GET /__counts``
(``requests bytes_sent heads``) and ``GET /__reset`` without counting them.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def answer_range(handler: BaseHTTPRequestHandler, data: bytes, *, body: bool, ranges: bool, sent=None) -> None:
    """Answers ``handler``'s GET (``body``) or HEAD of ``data``: ``206`` with its ``Content-Range`` for a
    ``Range: bytes=a-b`` when ``ranges``, else ``200`` and the whole object. ``sent(n)`` counts the body bytes
    before they are written (a client may move on, and a test reset the counts, as soon as it has them)."""
    wanted = handler.headers.get("Range")
    if wanted and ranges and body:
        first, last = wanted.split("=", 1)[1].split("-")
        lo, hi = int(first), min(int(last) if last else len(data) - 1, len(data) - 1)
        chunk = data[lo:hi + 1]
        handler.send_response(206)
        handler.send_header("Content-Range", f"bytes {lo}-{hi}/{len(data)}")
    else:
        chunk = data
        handler.send_response(200)
    handler.send_header("Content-Length", str(len(chunk)))
    if ranges:
        handler.send_header("Accept-Ranges", "bytes")
    handler.end_headers()
    if body:
        if sent is not None:
            sent(len(chunk))
        handler.wfile.write(chunk)


class CountedHttp:
    """Serves ``objects`` (path -> bytes) at ``base``; ``requests``, ``heads`` and ``bytes_sent`` count answers."""

    def __init__(self, objects: dict[str, bytes]):
        self.objects = dict(objects)
        self.requests = self.heads = self.bytes_sent = 0
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def counts(self) -> tuple[int, int]:
        """``(requests, bytes_sent)`` so far."""
        with self.lock:
            return self.requests, self.bytes_sent

    def reset(self) -> None:
        with self.lock:
            self.requests = self.heads = self.bytes_sent = 0

    def count_sent(self, nbytes: int) -> None:
        with self.lock:
            self.bytes_sent += nbytes

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def _handler(self):
        state = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # (see servers.LoopbackServer.serve)

            def log_message(self, *args) -> None:
                pass

            def _control(self) -> bool:
                if self.path not in ("/__counts", "/__reset"):
                    return False
                if self.path == "/__reset":
                    state.reset()
                with state.lock:
                    payload = json.dumps([state.requests, state.bytes_sent, state.heads]).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return True

            def _serve(self, body: bool) -> None:
                if body and self._control():
                    return
                data = state.objects.get(self.path.split("?", 1)[0])
                with state.lock:  # counted on arrival: a client counts a request also when it fails
                    state.requests += 1
                    state.heads += not body
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                answer_range(self, data, body=body, ranges=True, sent=state.count_sent)

            def do_GET(self) -> None:
                self._serve(True)

            def do_HEAD(self) -> None:
                self._serve(False)

        return Handler


def counts_of(base: str, *, reset: bool = False) -> tuple[int, int, int]:
    """``(requests, bytes_sent, heads)`` of the server process at ``base`` (then zero with ``reset``)."""
    with urllib.request.urlopen(f"{base}/__reset" if reset else f"{base}/__counts", timeout=30) as answer:
        return tuple(json.loads(answer.read()))


if __name__ == "__main__":
    folder = sys.argv[1]
    objects = {f"/{name}": open(os.path.join(folder, name), "rb").read() for name in sorted(os.listdir(folder))}
    server = CountedHttp(objects)
    print(server.base, flush=True)
    sys.stdin.read()  # serves until the parent closes our stdin
    server.stop()
