"""A webhook receiver for the tests (README's Webhooks): a threaded HTTP server on loopback that records
every POST (when, headers, raw body) and answers the statuses queued in `answers` (200 once
they run out). `port=` starts it on a given port: a receiver that comes back where it was.

Loopback is no receiver address by default (docs/security.md): a stack whose sessions post
here allows it the way an operator would, with ALLOW_LOOPBACK_ENV in its environment; a
sender built in a test takes LOOPBACK_ALLOWED."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from daemon.host.receiveraddresses import ALLOW_NETWORKS_VARIABLE, ReceiverPolicy

ALLOW_LOOPBACK_ENV = {ALLOW_NETWORKS_VARIABLE: "127.0.0.1/32"}
LOOPBACK_ALLOWED = ReceiverPolicy.of(False, "127.0.0.1/32")


class Receiver:
    def __init__(self, port: int = 0) -> None:
        self.requests: list[tuple[float, dict[str, str], bytes]] = []  # (time.time(), headers, body)
        self.answers: list[int] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                with receiver.lock:
                    receiver.requests.append((time.time(), headers, body))
                    status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Location", "http://127.0.0.1:9/elsewhere")  # never followed
                self.end_headers()
                self.wfile.write(b"x" * 4000)  # only a capped excerpt is kept

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def received(
        self, session_id: str | None = None, kind: str | None = None
    ) -> list[tuple[float, dict[str, str], bytes]]:
        """The requests (of one session, of one type), in arrival order."""
        with self.lock:
            requests = list(self.requests)
        return [
            r
            for r in requests
            if (session_id is None or json.loads(r[2]).get("sessionId") == session_id)
            and (kind is None or r[1].get("x-worktrain-event") == kind)
        ]
