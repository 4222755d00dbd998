"""A rule for coordination scripts: the goal tells the fake agent what to do (spawn, ask, fail).

The session's goal (the system prompt's `- Goal:` line) is `fake:` followed by a JSON
object; its first turn does what the object says, every later turn calls continue_workflow
with notes that quote the last tool result (so a test sees what the agent was told):

- `{"spawn": [spec, ...]}` — spawn_agent with `agents` (`"single": true`: the one-child form);
- `{"ask": "question"}` — signal_coordinator kind question, `wait: true`;
- `{"signal": "summary"}` — signal_coordinator kind progress, then continue in the same turn;
- `{"fatal": "summary"}` — report_issue severity fatal, then continue_workflow (ends failed);
- `{"notes": "..."}` — continue_workflow with these notes at once;
- `"bash": "command"` beside any of these — a Bash call first, in the same reply.

Tool-use ids are fresh on every call (daemon/fakemodel/script.py `with_fresh_ids`), as the API
mints them: a turn asked again after a crash gets new ids (docs/durability.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel.script import reply, text, tool
from daemon.turn.messages import ToolResultBlock

GOAL_LINE = re.compile(r"^- Goal: fake:(.*)$", re.MULTILINE)
PAD = " (the fake coordination agent's notes are padded to the fifty characters continue_workflow asks.)"


def directive(system: str) -> dict[str, Any]:
    match = GOAL_LINE.search(system)
    if match is None:
        return {}
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def last_results(request: ModelRequest) -> str:
    """The tool results of the request's last user message, joined."""
    if not request.messages or request.messages[-1].role != "user":
        return ""
    return "\n".join(
        str(block.content) for block in request.messages[-1].content if isinstance(block, ToolResultBlock)
    )


def coordination_rule(request: ModelRequest) -> ModelReply:
    wants = directive(request.system)
    turn = sum(1 for m in request.messages if m.role == "assistant") + 1
    answer = _by_directive(wants, turn, request)
    if "bash" in wants and turn == 1:
        return reply(tool("Bash", f"toolu_coord_{turn}_bash", command=str(wants["bash"])), *answer.content)
    return answer


def _by_directive(wants: dict[str, Any], turn: int, request: ModelRequest) -> ModelReply:
    if turn > 1:
        notes = f"Turn {turn} notes. The last tool result: {last_results(request)[:2000]}"
        return reply(
            text(f"Turn {turn}: done."),
            tool("continue_workflow", f"toolu_coord_{turn}_continue", notes=notes + PAD),
        )
    if "spawn" in wants:
        specs = wants["spawn"]
        if wants.get("single"):
            return reply(
                text("Handing this to one child."),
                tool("spawn_agent", f"toolu_coord_{turn}_spawn", **specs[0]),
            )
        return reply(
            text("Handing this to children."), tool("spawn_agent", f"toolu_coord_{turn}_spawn", agents=specs)
        )
    if "ask" in wants:
        ask = tool(
            "signal_coordinator", f"toolu_coord_{turn}_ask", kind="question", summary=wants["ask"], wait=True
        )
        return reply(text("I need an answer first."), ask)
    if "fatal" in wants:
        issue = tool(
            "report_issue",
            f"toolu_coord_{turn}_issue",
            kind="blocked",
            severity="fatal",
            summary=wants["fatal"],
        )
        notes = f"Blocked: {wants['fatal']}" + PAD
        return reply(
            text("I cannot go on."),
            issue,
            tool("continue_workflow", f"toolu_coord_{turn}_continue", notes=notes),
        )
    blocks = []
    if "signal" in wants:
        blocks.append(
            tool("signal_coordinator", f"toolu_coord_{turn}_signal", kind="progress", summary=wants["signal"])
        )
    notes = str(wants.get("notes", "Nothing special to do.")) + PAD
    blocks.append(tool("continue_workflow", f"toolu_coord_{turn}_continue", notes=notes))
    return reply(text("Working."), *blocks)
