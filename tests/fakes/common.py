"""What the fake GitHub and GitLab APIs share: a threaded HTTP server on loopback, a request
log, a clock that moves forward by a second at each change (so `updated_at` orders
changes as the real services' do), pages, ETags and 304s, rate-limit budgets, and faults
(a status for the next N requests, before or after the write; a request that hangs).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Logged:
    at: float
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names in lower case
    body: bytes
    status: int = 0


@dataclass
class Fault:
    method: str
    path_prefix: str
    status: int
    times: int = 1
    after_write: bool = False  # the change is made, then the error answered (an ambiguous failure)
    hang_seconds: float = 0.0  # hold the answer this long first (a client timeout)


@dataclass
class Answer:
    status: int
    body: Any = None  # JSON-able, or None for no body
    headers: dict[str, str] = field(default_factory=dict)


class Clock:
    """The service's own time: the wall clock in whole seconds, moved at least a second
    forward at each change (`tick`), so every change has an `updated_at` of its own."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)
        self.lock = threading.Lock()

    def tick(self) -> datetime:
        with self.lock:
            self.now = max(self.now + timedelta(seconds=1), datetime.now(UTC).replace(microsecond=0))
            return self.now


Route = Callable[["Request"], Answer]


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    base_url: str

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class FakeService:
    """The HTTP side: subclasses register `(method, path pattern) -> route` in `route()`."""

    def __init__(self) -> None:
        self.log: list[Logged] = []
        self.faults: list[Fault] = []
        self.lock = threading.RLock()
        self.clock = Clock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                answer = service.handle(Request(self.command, parts.path, query, headers, body, service.url))
                data = b"" if answer.body is None else json.dumps(answer.body).encode()
                try:
                    self.send_response(answer.status)
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    if answer.status != 304:
                        self.send_header("Content-Type", "application/json; charset=utf-8")
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if answer.status != 304 and data:
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout it asked for)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- faults and the log ----------------------------------------------------------------

    def fail(
        self, method: str, path_prefix: str, status: int, times: int = 1, after_write: bool = False
    ) -> None:
        with self.lock:
            self.faults.append(Fault(method, path_prefix, status, times, after_write))

    def hang(self, method: str, path_prefix: str, seconds: float, times: int = 1) -> None:
        with self.lock:
            self.faults.append(Fault(method, path_prefix, 0, times, hang_seconds=seconds))

    def _fault_for(self, request: Request) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if (
                    fault.times > 0
                    and fault.method == request.method
                    and request.path.startswith(fault.path_prefix)
                ):
                    fault.times -= 1
                    return fault
        return None

    def requests(self, method: str | None = None, path_prefix: str = "") -> list[Logged]:
        with self.lock:
            return [
                r
                for r in self.log
                if (method is None or r.method == method) and r.path.startswith(path_prefix)
            ]

    def handle(self, request: Request) -> Answer:
        logged = Logged(
            time.time(), request.method, request.path, request.query, request.headers, request.body
        )
        with self.lock:
            self.log.append(logged)
        fault = self._fault_for(request)
        if fault is not None and fault.hang_seconds:
            time.sleep(fault.hang_seconds)
            fault = None
        if fault is not None and not fault.after_write:
            answer = Answer(fault.status, {"message": "Server Error (a fault the test asked for)"})
        else:
            answer = self.route(request)
            if fault is not None:
                answer = Answer(
                    fault.status, {"message": "Server Error after the write (a fault the test asked for)"}
                )
        logged.status = answer.status
        return answer

    def route(self, request: Request) -> Answer:
        raise NotImplementedError


def etag_of(body: Any) -> str:
    return 'W/"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:32] + '"'


def page_of(items: list[Any], query: dict[str, str], default: int = 30) -> tuple[list[Any], int, int]:
    """(this page's items, the page, the number of pages): `per_page` (at most 100), `page`."""
    per_page = max(1, min(int(query.get("per_page") or default), 100))
    page = max(1, int(query.get("page") or 1))
    pages = max(1, -(-len(items) // per_page))
    return items[(page - 1) * per_page : page * per_page], page, pages


def with_page(request: Request, page: int) -> str:
    query = {**request.query, "page": str(page)}
    return f"{request.base_url}{request.path}?" + "&".join(f"{k}={v}" for k, v in query.items())


def link_header(request: Request, page: int, pages: int) -> str | None:
    """GitHub's (and GitLab's) `Link`: next, last, first, prev as they apply."""
    links = []
    if page < pages:
        links += [
            f'<{with_page(request, page + 1)}>; rel="next"',
            f'<{with_page(request, pages)}>; rel="last"',
        ]
    if page > 1:
        links += [f'<{with_page(request, 1)}>; rel="first"', f'<{with_page(request, page - 1)}>; rel="prev"']
    return ", ".join(links) or None


class Budget:
    """A rate-limit budget: `limit` requests per window; a 304 costs nothing (GitHub's rule)."""

    def __init__(self, limit: int = 5000, window_seconds: int = 3600) -> None:
        self.limit = limit
        self.remaining = limit
        self.window = window_seconds
        self.reset = int(time.time()) + window_seconds
        self.lock = threading.Lock()

    def spend(self) -> bool:
        """Take one request; False when none is left (the caller answers 403/429)."""
        with self.lock:
            if time.time() >= self.reset:
                self.remaining, self.reset = self.limit, int(time.time()) + self.window
            if self.remaining <= 0:
                return False
            self.remaining -= 1
            return True

    def set(self, remaining: int, reset_in: int) -> None:
        with self.lock:
            self.remaining = remaining
            self.reset = int(time.time()) + reset_in


def stamp(moment: datetime, millis: bool = False) -> str:
    if millis:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
