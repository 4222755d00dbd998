"""A rule that walks a workflow with given outputs: each call completes the current step.

`continue_rule(calls)` answers every request with one `continue_workflow` whose `context`
and `artifacts` are the next entry of `calls` (the n-th accepted step gets `calls[n]`; a
blocked call is retried with the same entry; past the end, no context). It reads where it
is from the conversation alone, so a resumed session carries on correctly. When the last
result asks to wait for a confirmation (`gates: steer`), it ends its turn without a tool.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from daemon.agent.model import ModelRequest
from daemon.fakemodel.script import Answer, Rule, reply, text, tool
from daemon.turn.messages import Message, ToolResultBlock

NOTES = (
    "Did what this step asks: read the workspace, checked the facts the step needs, and wrote "
    "down what the next steps rely on."
)
ACCEPTED = ("advanced", "complete", "awaiting_confirmation")


def continue_results(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The parsed results of every continue_workflow call in the conversation, in order."""
    uses = (use for m in messages if m.role == "assistant" for use in m.tool_uses)
    calls = {use.id for use in uses if use.name == "continue_workflow"}
    found = []
    for message in messages:
        for block in message.content:
            if isinstance(block, ToolResultBlock) and block.tool_use_id in calls:
                try:
                    body = json.loads(block.content)
                except ValueError:
                    body = None
                status = body.get("status") if isinstance(body, dict) else "error"
                found.append({"status": status, "is_error": block.is_error})
    return found


def _nothing_delivered(messages: Sequence[Message]) -> bool:
    """The last message holds tool results and no text after them (no step, no steer)."""
    last = messages[-1] if messages else None
    return last is not None and not last.texts and any(isinstance(b, ToolResultBlock) for b in last.content)


def continue_rule(calls: Sequence[Mapping[str, Any]], notes: str = NOTES) -> Rule:
    def rule(request: ModelRequest) -> Answer:
        messages = list(request.messages)
        turn = sum(1 for m in messages if m.role == "assistant") + 1
        results = continue_results(messages)
        if any(r.get("status") == "complete" for r in results):
            return reply(text("The workflow is complete."))
        if results and results[-1].get("status") == "awaiting_confirmation" and _nothing_delivered(messages):
            return reply(text("Waiting for the coordinator's confirmation before the next step."))
        accepted = sum(1 for r in results if r.get("status") in ACCEPTED and not r["is_error"])
        call = calls[accepted] if accepted < len(calls) else {}
        args: dict[str, Any] = {"notes": notes}
        for key in ("context", "artifacts"):
            if call.get(key):
                args[key] = call[key]
        return reply(
            text(f"Turn {turn}: step {accepted + 1} is done; moving on."),
            tool("continue_workflow", tool_id=f"toolu_walk_{turn:04d}", **args),
        )

    return rule
