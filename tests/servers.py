"""Servers the tests start on 127.0.0.1 and stop themselves: moto's S3 server with the AWS variables pointing at it
(or at a proxy in front of it), and the base of the threaded HTTP servers (the proxies the storage tests put in between).

One place for what every S3 test module did by hand: pick a free port, start ``ThreadedMotoServer``, set the four
AWS variables (``AWS_ENDPOINT_URL`` at the server, or at the proxy), forget s3fs's cached filesystems on the way in
and out, stop every server also when the set-up fails.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import pytest

#: The secret key of the test servers (an error message must never show it).
TEST_SECRET = "testing-secret"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_moto():
    """A started moto S3 server on 127.0.0.1 and its port (the caller stops it); skips without moto/s3fs."""
    moto_server = pytest.importorskip("moto.server")
    pytest.importorskip("s3fs")
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, port


def aws_env(endpoint: str, secret: str = TEST_SECRET) -> dict[str, str]:
    """The standard AWS variables for a test server at ``endpoint`` (``http://127.0.0.1:PORT``)."""
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": endpoint}


def forget_s3_filesystems() -> None:
    """Drops s3fs's cached filesystems (their endpoint and listings), so the next one reads the variables again."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()


@dataclass
class S3Server:
    """A running moto server as the tests see it: ``fs`` reaches it (through the proxy when there is one)."""

    fs: Any
    port: int  # moto's own port
    endpoint: str  # what AWS_ENDPOINT_URL holds: the proxy's address when there is one, else moto's
    env: dict[str, str] = field(default_factory=dict)
    proxy: Any = None


@contextlib.contextmanager
def moto_s3(*, secret: str = TEST_SECRET, proxy: Callable[[int], Any] | None = None):
    """moto on 127.0.0.1, the AWS variables set for this process (and the processes it starts): an :class:`S3Server`.

    ``proxy(port)`` makes a proxy in front of moto's ``port`` (an object with ``port`` and ``stop()``); the
    variables then point at it. Every server is stopped and the variables restored on exit.
    """
    server, port = start_moto()
    front = None
    try:
        front = proxy(port) if proxy is not None else None
        env = aws_env(f"http://127.0.0.1:{front.port if front is not None else port}", secret)
        with pytest.MonkeyPatch.context() as mp:
            for k, v in env.items():
                mp.setenv(k, v)
            forget_s3_filesystems()
            try:
                import s3fs

                yield S3Server(s3fs.S3FileSystem(), port, env["AWS_ENDPOINT_URL"], env, front)
            finally:
                forget_s3_filesystems()
    finally:
        if front is not None:
            front.stop()
        server.stop()


class LoopbackServer:
    """A test's threaded HTTP server (a proxy, a file server) on 127.0.0.1: ``serve(Handler)`` runs it on a thread.

    Subclasses (or callers) build their ``BaseHTTPRequestHandler`` and call :meth:`serve`; ``port`` is then where
    clients connect, and :meth:`stop` shuts the server and joins its thread.
    """

    def serve(self, handler: type[BaseHTTPRequestHandler]) -> None:
        # An answer's headers and body go out as two writes: with Nagle's algorithm the body waits for the
        # client's delayed ACK of the headers (40 ms a request on Linux), so small ranged reads look slow.
        handler = type(handler.__name__, (handler,), {"disable_nagle_algorithm": True})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


# The parts of a forwarding proxy's handler (``BaseHTTPRequestHandler``) that every proxy of the tests shares.
def request_body(handler: BaseHTTPRequestHandler) -> bytes | None:
    """The body the client sent with the request (None without one)."""
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else None


def request_headers(handler: BaseHTTPRequestHandler) -> dict[str, str]:
    """The request's headers to forward: all but ``Connection`` (the proxy opens a connection of its own)."""
    return {k: v for k, v in handler.headers.items() if k.lower() != "connection"}


def forward(handler: BaseHTTPRequestHandler, target_port: int, headers: dict[str, str], body: bytes | None):
    """Sends the handler's request (its method and path, with ``headers`` and ``body``) to 127.0.0.1:``target_port``
    on a fresh connection: ``(response, its whole body)``."""
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=30)
    try:
        conn.request(handler.command, handler.path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp, resp.read()
    finally:
        conn.close()


def send_head(handler: BaseHTTPRequestHandler, resp, data: bytes) -> None:
    """Starts the answer to the client with the server's status and headers; ``Content-Length`` is ``data``'s
    length, or for a HEAD (which has no body) the object's length the server gave."""
    handler.send_response(resp.status)
    for k, v in resp.getheaders():
        if k.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
            handler.send_header(k, v)
    handler.send_header("Content-Length", resp.getheader("Content-Length", "0") if handler.command == "HEAD"
                        else str(len(data)))
    handler.end_headers()
