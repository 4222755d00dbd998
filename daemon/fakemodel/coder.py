"""`coder_rule`: a fake agent doing real coding work with Glob, Grep, Read, Edit and Bash.

It takes its orders from the goal (in the system prompt), one per line:
- `edit <path>: <old> => <new>` — find the file (Glob, and Grep for `<old>`), Read it, then
  Edit it (exact replacement);
- `bash: <command>` — run the command after the edits (e.g. `git add -A && git commit ...`,
  or a `sleep` that keeps the session busy while a test cancels or kills it).
Turn 1 looks (Glob, Grep, Read of every file to edit); turn 2 changes (Edit each, then the
commands); every later turn calls continue_workflow, with notes naming what changed, until
the workflow is complete. It reads where it is from the conversation alone, so a session
resumed after a crash carries on at the right turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from daemon.agent.model import ModelRequest
from daemon.fakemodel.script import Answer, reply, summary_reply, text, tool
from daemon.fakemodel.walk import continue_results
from daemon.turn.messages import ContentBlock

_EDIT = re.compile(r"^edit (?P<path>[^:\s]+): (?P<old>.+?) => (?P<new>.*)$", re.MULTILINE)
_BASH = re.compile(r"^bash: (?P<command>.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Orders:
    edits: list[tuple[str, str, str]]
    commands: list[str]

    @classmethod
    def of(cls, system: str) -> Orders:
        edits = [(m["path"], m["old"], m["new"]) for m in _EDIT.finditer(system)]
        return cls(edits, [m["command"] for m in _BASH.finditer(system)])


def coder_rule(request: ModelRequest) -> Answer:
    if not request.tools:
        return summary_reply(request)
    messages = list(request.messages)
    turn = sum(1 for m in messages if m.role == "assistant") + 1
    orders = Orders.of(request.system)
    if any(r.get("status") == "complete" for r in continue_results(messages)):
        return reply(text("The workflow is complete."))
    blocks: list[ContentBlock] = [text(f"Turn {turn}.")]
    if turn == 1:
        blocks.append(tool("Glob", tool_id="toolu_coder_glob", pattern="**/*"))
        for index, (path, old, _new) in enumerate(orders.edits):
            blocks.append(tool("Grep", tool_id=f"toolu_coder_grep_{index}", pattern=re.escape(old)))
            blocks.append(tool("Read", tool_id=f"toolu_coder_read_{index}", path=path))
        if orders.edits:
            return reply(*blocks)
    elif turn == 2 and (orders.edits or orders.commands):
        for index, (path, old, new) in enumerate(orders.edits):
            blocks.append(
                tool("Edit", tool_id=f"toolu_coder_edit_{index}", path=path, old_string=old, new_string=new)
            )
        for index, command in enumerate(orders.commands):
            blocks.append(tool("Bash", tool_id=f"toolu_coder_bash_{index}", command=command))
        return reply(*blocks)
    changed = ", ".join(path for path, _old, _new in orders.edits) or "nothing"
    notes = f"Coder notes (turn {turn}): changed {changed} as the goal asks, and checked the result."
    blocks.append(tool("continue_workflow", tool_id=f"toolu_coder_continue_{turn}", notes=notes))
    return reply(*blocks)
