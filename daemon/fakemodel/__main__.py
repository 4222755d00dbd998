"""`python -m daemon.fakemodel [--port N] [--rule demo|walk|coder|coord] [--calls FILE] [--latency S]
[--errors SPEC] [--max-prompt-tokens N]`: the fake API.

`--rule walk` completes each workflow step with one continue_workflow; `--calls` names a JSON
list of `{"context": {...}, "artifacts": [...]}`, the n-th used for the n-th step.
`--rule coord` does what a session's goal `fake:{...}` says (spawn_agent, a question, a
fatal issue: daemon/fakemodel/coord.py).
`--errors 529,529,429:3,503` answers the first requests with those errors (`STATUS:S` adds
`retry-after: S`; `stream-overload` breaks a 200 stream with an overloaded_error), then the
rule; `--max-prompt-tokens` is a context window (400 "prompt is too long" beyond it).

Prints `fake model listening on <url>` once ready; point ANTHROPIC_BASE_URL at that URL
(with any ANTHROPIC_API_KEY). Stops on SIGINT or SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from daemon.fakemodel.coder import coder_rule
from daemon.fakemodel.coord import coordination_rule
from daemon.fakemodel.script import RULES, summarising, weather
from daemon.fakemodel.server import FakeModelServer, serve_until_signalled
from daemon.fakemodel.walk import continue_rule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m daemon.fakemodel", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--rule", choices=sorted([*RULES, "walk", "coder", "coord"]), default="demo", help="how to answer"
    )
    parser.add_argument("--calls", type=Path, help="walk: JSON list of {context, artifacts}, one per step")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--hold", action="store_true", help="start held (POST /_fake/release)")
    parser.add_argument("--errors", default="", help="errors answered first, e.g. 529,529,429:3,503")
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="the context window")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fakemodel %(levelname)s %(message)s")
    if args.rule == "coord":  # the goal says what to do: spawn, ask, fail (daemon/fakemodel/coord.py)
        rule = summarising(coordination_rule)
    elif (
        args.rule == "coder"
    ):  # Glob, Grep, Read, Edit and Bash as the goal orders (daemon/fakemodel/coder.py)
        rule = summarising(coder_rule)
    elif args.rule == "walk":
        rule = summarising(continue_rule(json.loads(args.calls.read_text()) if args.calls else []))
    else:
        rule = RULES[args.rule]
    server = FakeModelServer(
        list(weather(args.errors)),
        rule=rule,
        latency=args.latency,
        port=args.port,
        host=args.host,
        max_prompt_tokens=args.max_prompt_tokens,
    )
    if args.hold:
        server.hold()
    return serve_until_signalled(server)


if __name__ == "__main__":
    sys.exit(main())
