"""The system prompt (docs/DEVELOPING.md): a stable constant plus the dynamic parts of one session."""

from __future__ import annotations

import json
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.host.safefile import read_up_to
from daemon.sandbox.roots import private_inodes
from daemon.tools.confine import Escape, open_beneath

log = logging.getLogger(__name__)

PROJECT_NOTES_FILES = ("AGENTS.md", "CLAUDE.md")
PROJECT_NOTES_CAP = 16_000
SOUL_CAP = 8_000
CONTEXT_CAP = 4_000
GUIDANCE_CAP = 8_000

BASE_SYSTEM_PROMPT = """\
You are WorkRail Auto, an autonomous software engineering agent run by the WorkTrain daemon.
You work through a workflow, one step at a time, in a code repository (the workspace).
No human is watching each turn: you decide, act with your tools, and check your own work.

## How to think
- The workspace is the oracle: read the code, run the tests, look at git history. Prefer
  what you observe over what you assume; verify a claim before you build on it.
- Work in small, checkable moves. After each change, confirm it did what you meant.
- When a step is ambiguous, choose the most reasonable reading, say which in your notes,
  and go on.

## Your tools
- `continue_workflow` — complete the current step (notes of at least 50 characters: what
  you did and found) and receive the next step, or `{"status": "complete"}` at the end.
- `Bash` — run a shell command in the workspace (stdin closed, time-limited, long output
  keeps its head and tail).
- `Read` — read a file of the workspace with line numbers (offset/limit for long files),
  or list a directory.
- `Write` — create or replace a file of the workspace.
- `report_issue` — record a problem for the humans and coordinators watching this session.
- `signal_coordinator` — tell your coordinator something without ending the step: progress,
  a finding, a result; or ask a question with `wait: true` when you cannot go on without an
  answer (the reply comes back as the call's result).
- `spawn_agent` — hand separable pieces of work to child agents (one, or up to 10 in
  parallel) and wait for their notes; use it for independent subtasks, not for one small
  step you can do yourself.
- `Edit` — change part of a file by exact string replacement (read the file first; the
  string must be unique unless replace_all). Prefer it to rewriting a file with Write.
- `Glob` — find files by path pattern (`**/*.py`), newest first, .gitignore honoured.
- `Grep` — search file contents by regular expression (ripgrep); prefer it to Bash grep.
Paths are relative to the workspace; nothing outside it can be read or written.

## Execution contract
- The workflow is the contract: do each step's work, then call `continue_workflow`. Do not
  skip steps and do not stop before the workflow says it is complete.
- Messages may arrive from a coordinator between your turns. They come after the tool
  results, in the same user message. Treat them as instructions for the current work;
  they take precedence over your plan, never over safety.
- End your turn without a tool call only when you need input you cannot get yourself; a
  coordinator may answer, otherwise the session ends as incomplete.

## Never fail silently
If a tool fails in a way you cannot work around, you are blocked, something behaves
unexpectedly, a decision needs a human, or you corrected a mistake of your own: call
`report_issue` with the kind, a severity and a one-line summary, then carry on. Do not
pretend a step succeeded. If the work cannot continue at all, report it with severity
`fatal`, then call `continue_workflow` with notes explaining the blocker; the session ends
after that call.
"""
"""The stable part of the system prompt.

It is a module constant, not assembled per call, because it must be byte-identical across
every turn and every session: the system prompt carries `cache_control`, and only an
unchanged prefix hits the prompt cache. It is also a document in its own right — one place
to read (and test) what every agent is told. Per-session facts go in `build_system_prompt`.
"""


@dataclass(frozen=True)
class PromptInputs:
    """The dynamic facts of one session, gathered at the edge (see `gather_prompt_inputs`)."""

    session_id: str
    workflow_id: str
    workflow_name: str
    step_count: int
    goal: str
    workspace: str
    soul: str | None = None
    project_notes: tuple[tuple[str, str], ...] = ()  # (file name, capped text)
    context: str | None = None  # the dispatch `context`, as JSON (capped)
    workflow_guidance: tuple[str, ...] = ()  # the workflow's `metaGuidance` (docs/workflows.md)


def build_system_prompt(inputs: PromptInputs) -> str:
    """BASE_SYSTEM_PROMPT plus this session's state, soul and project notes. Pure.

    Nothing here changes during a session (the current step is in the messages, not here),
    so the system prompt stays cacheable from the first turn to the last.
    """
    sections = [
        BASE_SYSTEM_PROMPT,
        "## Session\n"
        f"- Session: {inputs.session_id}\n"
        f"- Workflow: {inputs.workflow_name} ({inputs.workflow_id}), {inputs.step_count} step(s)\n"
        f"- Workspace: {inputs.workspace}\n"
        f"- Goal: {inputs.goal}" + (f"\n- Context: {inputs.context}" if inputs.context else ""),
    ]
    if inputs.workflow_guidance:
        guidance = "\n".join(f"- {line}" for line in inputs.workflow_guidance)
        sections.append("## Workflow guidance\n" + _capped(guidance, GUIDANCE_CAP))
    if inputs.soul:
        sections.append(f"## Operator guidance\n{inputs.soul}")
    for name, text in inputs.project_notes:
        sections.append(f"## Project notes ({name})\n{text}")
    return "\n\n".join(section.rstrip() for section in sections) + "\n"


def read_capped(path: Path, cap: int) -> str | None:
    """A text file's content cut to `cap` characters (the cut said), or None if unreadable."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return _capped(text, cap)


def read_project_note(workspace: Path, name: str, cap: int) -> str | None:
    """`name` in the workspace read as `Read` reads (docs/security.md, finding M3), or None: walked
    beneath the workspace without following a symlink out (no resolve-then-read window), a
    regular file with one link only (a FIFO is refused at once, never waited on), never in
    the data dir, and no more than `cap` characters' worth of bytes read (a 400 MiB file
    costs what its first `cap` characters do)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY
    try:
        with open_beneath(workspace, name, flags, forbidden=private_inodes()) as opened:
            if not stat.S_ISREG(opened.status.st_mode) or opened.status.st_nlink > 1:
                log.warning("%s in %s is not a regular file with one link; not read", name, workspace)
                return None
            data = read_up_to(opened.fd, cap * 4 + 4)  # a UTF-8 character is at most 4 bytes
    except FileNotFoundError:
        return None
    except (Escape, OSError) as exc:
        log.warning("%s in %s is not read: %s", name, workspace, exc)
        return None
    return _capped(data.decode("utf-8", errors="replace"), cap)


def gather_prompt_inputs(
    session_id: str,
    workflow_id: str,
    workflow_name: str,
    step_count: int,
    goal: str,
    workspace: Path,
    soul_file: Path | None,
    context: dict[str, Any] | None = None,
    workflow_guidance: tuple[str, ...] = (),
) -> PromptInputs:
    """Read the soul file and the workspace's AGENTS.md / CLAUDE.md (capped): the I/O edge."""
    soul = read_capped(soul_file, SOUL_CAP) if soul_file is not None else None
    if soul_file is not None and soul is None:
        log.warning("soul file %s is not readable; ignored", soul_file)
    notes = tuple(
        (name, text)
        for name in PROJECT_NOTES_FILES
        if (text := read_project_note(workspace, name, PROJECT_NOTES_CAP)) is not None
    )
    return PromptInputs(
        session_id=session_id,
        workflow_id=workflow_id,
        workflow_name=workflow_name,
        step_count=step_count,
        goal=goal,
        workspace=str(workspace),
        soul=soul,
        project_notes=notes,
        context=_capped_json(context) if context else None,
        workflow_guidance=workflow_guidance,
    )


def _capped_json(value: dict[str, Any]) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= CONTEXT_CAP else text[:CONTEXT_CAP] + " [... cut ...]"


def _capped(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f"\n[... cut at {cap} characters ...]"
