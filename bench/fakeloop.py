"""The project's fake Messages API with a rule for benchmarks: a cheap tool, turn after turn.

    .venv/bin/python bench/fakeloop.py --port 0 [--latency 1.0] [--finish-after 200] [--compact]

Every turn the agent asks for one `Read` of README.md (a cheap tool that works, so the
session makes progress) and says which steer texts it just received; on turn
`--finish-after` it calls `continue_workflow` instead, which completes a one-step workflow.
`--compact` keeps, per request, only what the scale bench checks (arrival time, session id,
turn, the texts of the last user message) instead of the whole body: 100 sessions x 120
turns of full histories would not fit in memory.

Prints `fake model listening on <url>` once ready; `GET /_fake/requests` returns what was
recorded. Stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import gc
import re
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from daemon.agent.model import ModelRequest
from daemon.fakemodel import FakeModelServer, reply, text, tool
from daemon.fakemodel.script import Answer, Rule
from daemon.fakemodel.server import _Handler, serve_until_signalled

SESSION_RE = re.compile(r"- Session: (sess_[0-9A-Z]{26})")
NOTES = "Benchmark notes: the loop read README.md on every turn and is done with this step now."


def loop_rule(finish_after: int) -> Rule:
    def rule(request: ModelRequest) -> Answer:
        turn = sum(1 for m in request.messages if m.role == "assistant") + 1
        if turn >= finish_after:
            return reply(text(f"Turn {turn}: done."), tool("continue_workflow", notes=NOTES))
        return reply(text(f"Turn {turn}: reading."), tool("Read", path="README.md"))

    return rule


def summary(body: dict[str, Any], arrived: float) -> dict[str, Any]:
    """What the scale bench needs of one request."""
    system = body.get("system") or ""
    if isinstance(system, list):
        system = "".join(str(block.get("text", "")) for block in system)
    found = SESSION_RE.search(system)
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    content = last.get("content") or []
    texts = (
        [content]
        if isinstance(content, str)
        else [b.get("text", "") for b in content if b.get("type") == "text"]
    )
    return {
        "t": arrived,
        "session": found.group(1) if found else None,
        "turn": sum(1 for m in messages if m.get("role") == "assistant") + 1,
        "texts": texts,
    }


ARRIVAL = threading.local()


class TimedHandler(_Handler):
    """Notes when a request's first line was read, before its body is read and parsed, and
    when its answer's last byte was written (`done`: the reply is the caller's from then on;
    the turnaround of a session is its next request's `t` minus this)."""

    def do_POST(self) -> None:
        ARRIVAL.t = time.time()
        ARRIVAL.summary = None
        super().do_POST()
        if ARRIVAL.summary is not None:
            ARRIVAL.summary["done"] = time.time()


class CompactServer(FakeModelServer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._httpd.RequestHandlerClass = TimedHandler

    def record(self, body: dict[str, Any]) -> None:
        ARRIVAL.summary = summary(body, getattr(ARRIVAL, "t", time.time()))
        super().record(ARRIVAL.summary)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--finish-after", type=int, default=200)
    parser.add_argument("--compact", action="store_true")
    args = parser.parse_args(argv)
    ThreadingHTTPServer.request_queue_size = 256  # the listen backlog: 100 sessions connect at once
    kind = CompactServer if args.compact else FakeModelServer
    server = kind(rule=loop_rule(args.finish_after), latency=args.latency, port=args.port)
    gc.disable()  # the recorded bodies are many objects and no cycles: no 200 ms gen-2 pauses
    return serve_until_signalled(server)


if __name__ == "__main__":
    sys.exit(main())
