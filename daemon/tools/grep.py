"""`Grep` (README's Coding sessions, v3 tools): search file contents with ripgrep (daemon/tools/ripgrep.py).

The pattern is ripgrep's regex syntax, passed with `-e` (a pattern starting with `-` is
still a pattern); `.gitignore` honoured, binary files skipped, lines longer than
`MAX_COLUMNS` shown as a preview. Output modes as WorkRail's and Claude Code's: the files
that match (default), the matching lines, or a count per file; `head_limit` lines at most
(the cut said).
"""

from __future__ import annotations

import os
import stat
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.sandbox.roots import private_inodes
from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.confine import Escape, open_beneath
from daemon.tools.files import os_error, refuse_special
from daemon.tools.ripgrep import in_workspace, run_rg

DEFAULT_HEAD_LIMIT = 250
MAX_HEAD_LIMIT = 5000
MAX_COLUMNS = 500
OutputMode = Literal["content", "files_with_matches", "count"]


class GrepInput(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    pattern: str = Field(min_length=1, max_length=2000, description="A regular expression (ripgrep syntax).")
    path: str | None = Field(default=None, description="File or folder to search (default: the workspace).")
    glob: str | None = Field(
        default=None, description="Only files matching this glob (e.g. `*.py`, `**/*.{ts,tsx}`)."
    )
    type: str | None = Field(
        default=None, description="Only files of this ripgrep type (e.g. py, js, rust, go)."
    )
    ignore_case: bool = Field(default=False, alias="-i", description="Case-insensitive search.")
    line_numbers: bool = Field(default=True, alias="-n", description="Line numbers (content mode).")
    context: int | None = Field(
        default=None, ge=0, le=50, description="Lines of context around each match (content mode)."
    )
    output_mode: OutputMode = Field(
        default="files_with_matches",
        description="`files_with_matches` (default: paths), `content` (matching lines), `count` (per file).",
    )
    head_limit: int | None = Field(
        default=None,
        ge=1,
        le=MAX_HEAD_LIMIT,
        description=f"At most this many lines (default {DEFAULT_HEAD_LIMIT}).",
    )


def _rg_args(args: GrepInput, target: str | None) -> list[str]:
    flags: list[str] = ["--max-columns", str(MAX_COLUMNS), "--max-columns-preview"]
    if args.output_mode == "files_with_matches":
        flags.append("--files-with-matches")
    elif args.output_mode == "count":
        flags.append("--count")
    else:
        flags += ["--with-filename", "--line-number" if args.line_numbers else "--no-line-number"]
        if args.context:
            flags += ["--context", str(args.context)]
    if args.ignore_case:
        flags.append("--ignore-case")
    if args.glob:
        flags.append(f"--glob={args.glob}")
    if args.type:
        flags.append(f"--type={args.type}")
    return [*flags, "-e", args.pattern, "--", target or "."]


def grep(args: GrepInput, ctx: ToolContext) -> ToolOutput:
    folder, target = _target(ctx, args.path)
    limit = args.head_limit or DEFAULT_HEAD_LIMIT
    found = run_rg(ctx, folder, _rg_args(args, target), limit)
    if not found.lines:
        complaints = "\n".join(found.errors)
        return ToolOutput(f"No matches for {args.pattern!r}." + (f"\n{complaints}" if complaints else ""))
    lines = [_relative(folder, line) for line in found.lines]
    body = "\n".join(lines)
    if found.cut:
        body += (
            f"\n[... cut at {limit} lines: narrow the search or raise head_limit (max {MAX_HEAD_LIMIT}) ...]"
        )
    if found.errors:
        body += "\n[rg could not read some files: " + "; ".join(found.errors) + "]"
    return ToolOutput(body)


def _target(ctx: ToolContext, raw: str | None) -> tuple[str, str | None]:
    """(folder to run in, file inside it or None): `path` may name a folder or one regular
    file; walked like Read's paths, so neither leaves the workspace."""
    if not raw:
        return "", None
    try:
        with open_beneath(
            ctx.workspace, raw, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY, forbidden=private_inodes()
        ) as opened:
            relative = "" if opened.relative == "." else opened.relative
            if stat.S_ISDIR(opened.status.st_mode):
                return relative, None
            refuse_special(raw, opened, "Grep")
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise os_error(raw, exc, "search") from None
    folder, _, name = relative.rpartition("/")
    return folder, name


def _relative(folder: str, line: str) -> str:
    """rg prints `./x` or `x` for paths under the folder it ran in: workspace-relative here."""
    if line == "--":
        return line
    return in_workspace(folder, line.removeprefix("./"))


GREP = Tool(
    "Grep",
    "Search file contents with a regular expression (ripgrep), skipping .gitignore'd and binary "
    "files. output_mode: files_with_matches (default), content (matching lines; -n, context), "
    "count. Narrow with path, glob or type; at most head_limit lines. Prefer it to Bash grep.",
    GrepInput,
    grep,
)
