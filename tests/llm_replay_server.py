"""A tiny OpenAI-compatible server on 127.0.0.1 that replays recorded chat completions.

The LLM tests send real requests through litellm's HTTP path to this server;
nothing leaves the machine. A reply is chosen by a marker in the request's
messages (``replay-case: NAME`` anywhere in them, e.g. a comment in a parent's
source), else taken from a queue, and can be delayed (a timeout) or be an
HTTP error such as 429 (a rate limit).

    with ReplayServer() as server:
        server.add_case("fenced", Reply.fixture("fenced"))
        ...  # api_base=server.base_url
        assert len(server.requests) == 1
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "llm"
MARKER = re.compile(r"replay-case:\s*([A-Za-z0-9_\-]+)")


@contextlib.contextmanager
def loopback_only() -> Iterator[None]:
    """Fail any connection that would leave the machine (telemetry, a price-table download, ...)."""
    outside: list = []
    connect = socket.socket.connect

    def guarded(sock, address):
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1"):
            outside.append(address)
            raise OSError(f"test blocked a connection to {address}")
        return connect(sock, address)

    socket.socket.connect = guarded
    try:
        yield
    finally:
        socket.socket.connect = connect
    assert outside == [], f"connections outside 127.0.0.1: {outside}"


@dataclasses.dataclass(frozen=True)
class Reply:
    """One HTTP answer: a status, a JSON body, and how long to wait before sending it."""

    body: dict[str, Any]
    status: int = 200
    delay_s: float = 0.0
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def fixture(cls, name: str, **kwargs: Any) -> "Reply":
        """The recorded response ``tests/fixtures/llm/NAME.json``."""
        return cls(json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8")), **kwargs)

    @classmethod
    def rate_limited(cls) -> "Reply":
        """OpenAI's 429 answer when a rate limit is hit."""
        return cls.fixture("rate_limit", status=429, headers=(("retry-after", "0"),))


class ReplayServer:
    """Serves ``/v1/chat/completions`` (and ``/v1/models``) from recorded replies, in a thread."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []  # JSON bodies received, in order
        self.headers: list[dict[str, str]] = []  # their HTTP headers, lower-cased names
        self.max_in_flight = 0  # the most requests answered at once
        self._in_flight = 0
        self._cases: dict[str, collections.deque[Reply]] = {}
        self._sticky: dict[str, Reply] = {}
        self._queue: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False  # a delayed reply must not hold up the end of a test
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def add_case(self, name: str, *replies: Reply, sticky: bool = False) -> None:
        """Answer requests whose messages hold ``replay-case: NAME`` with ``replies`` in turn.

        ``sticky``: the (single) reply answers every such request.
        """
        with self._lock:
            if sticky:
                (self._sticky[name],) = replies
            else:
                self._cases.setdefault(name, collections.deque()).extend(replies)

    def enqueue(self, *replies: Reply) -> None:
        """Answer requests that carry no marker with ``replies``, first in first out."""
        with self._lock:
            self._queue.extend(replies)

    def requests_for(self, name: str) -> list[dict[str, Any]]:
        """The requests that carried the marker ``name``."""
        with self._lock:
            return [r for r in self.requests if _marker(r) == name]

    def record(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> int:
        """Keep a request (and its headers) as it arrives; its number, from 1. A subclass that
        answers in its own way calls it first."""
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers or {})
            return len(self.requests)

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        self.record(body, headers)
        with self._lock:
            name = _marker(body)
            if name is not None and name in self._sticky:
                return self._sticky[name]
            if name is not None and self._cases.get(name):
                return self._cases[name].popleft()
            if self._queue:
                return self._queue.popleft()
        return Reply({"error": {"message": f"no recorded reply for case {name!r}",
                                "type": "invalid_request_error"}}, status=400)

    def __enter__(self) -> "ReplayServer":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _marker(body: dict[str, Any]) -> str | None:
    text = "\n".join(str(m.get("content", "")) for m in body.get("messages", []))
    found = MARKER.search(text)
    return found.group(1) if found else None


def _handler(server: ReplayServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send(Reply({"object": "list", "data": [{"id": "test-model", "object": "model"}]}))
            else:
                self._send(Reply({"error": {"message": "not found"}}, status=404))

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send(Reply({"error": {"message": f"unknown path {self.path}"}}, status=404))
                return
            reply = server._next(body, {k.lower(): v for k, v in self.headers.items()})
            with server._lock:
                server._in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server._in_flight)
            try:
                time.sleep(reply.delay_s or 0.05)  # a little latency, so concurrent requests overlap
                self._send(reply)
            finally:
                with server._lock:
                    server._in_flight -= 1

        def _send(self, reply: Reply) -> None:
            data = json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

    return Handler
