"""The agent's tools (README's Coding sessions, with the v3 Edit, Glob and Grep) and the toolbox that
runs them.

Owns each tool's typed input, its confinement to the workspace (`confine`) and the toolbox
that runs a turn's calls and emits their events.

May import: `host`, `turn`, `workflows`, `bus` (the event and issue records), `sandbox`.
Must not import: `agent`, `session` (the loop calls the tools, never the other way).
"""

from __future__ import annotations

from typing import Any

from daemon.tools.base import (
    Emitter,
    Tool,
    Toolbox,
    ToolContext,
    ToolError,
    ToolOutput,
    WorkflowCursor,
)
from daemon.tools.bash import BASH
from daemon.tools.edit import EDIT
from daemon.tools.files import READ, WRITE
from daemon.tools.globbing import GLOB
from daemon.tools.grep import GREP
from daemon.tools.report_issue import REPORT_ISSUE
from daemon.tools.signal import SIGNAL_COORDINATOR
from daemon.tools.spawn import SPAWN_AGENT
from daemon.tools.workflow import CONTINUE_WORKFLOW

TOOL_NAMES = (
    "continue_workflow",
    "Bash",
    "Read",
    "Write",
    "report_issue",
    "Edit",
    "Glob",
    "Grep",
    "signal_coordinator",
    "spawn_agent",
)


def default_toolbox() -> Toolbox:
    """The tools, in the order the system prompt lists them."""
    tools: list[Tool[Any]] = [CONTINUE_WORKFLOW, BASH, READ, WRITE, REPORT_ISSUE, EDIT, GLOB, GREP]
    return Toolbox([*tools, SIGNAL_COORDINATOR, SPAWN_AGENT])


__all__ = [
    "TOOL_NAMES",
    "Emitter",
    "Tool",
    "ToolContext",
    "ToolError",
    "ToolOutput",
    "Toolbox",
    "WorkflowCursor",
    "default_toolbox",
]
