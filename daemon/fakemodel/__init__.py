"""The project's own scripted fake of the Anthropic Messages API (tests, demo, benchmarks).

- `ScriptedModel`: an in-process `Model` answering from a script (loop unit tests, no HTTP);
- `FakeModelServer`: the same scripts served over HTTP as `POST /v1/messages` (JSON and
  SSE streaming), so the real `anthropic` SDK talks to it; run it alone with
  `python -m daemon.fakemodel --port 8765 --rule demo`;
- `continue_rule(calls)`: a rule that walks a workflow, one continue_workflow per step with
  the given context/artifacts (`--rule walk --calls FILE`).

May import: `host`, `turn`, `workflows`, `agent` (it is a `Model`, and speaks its requests).
Must not import: `bus`, `session`. Nothing in the product's core imports it: only the
shells that start it (`worktrain up`, the demo) and the tests.
"""

from __future__ import annotations

from daemon.fakemodel.script import (
    RULES,
    FakeError,
    Script,
    ScriptedModel,
    ScriptExhausted,
    demo_rule,
    overloaded,
    prompt_too_long,
    rate_limited,
    reply,
    summarising,
    text,
    tool,
    unavailable,
    weather,
)
from daemon.fakemodel.server import FakeModelServer
from daemon.fakemodel.walk import continue_rule

__all__ = [
    "RULES",
    "FakeError",
    "FakeModelServer",
    "Script",
    "ScriptExhausted",
    "ScriptedModel",
    "continue_rule",
    "demo_rule",
    "overloaded",
    "prompt_too_long",
    "rate_limited",
    "reply",
    "summarising",
    "text",
    "tool",
    "unavailable",
    "weather",
]
