"""`Glob` (README's Coding sessions, v3 tools): the files whose path matches a glob, newest first.

Listed by `rg --files` (daemon/tools/ripgrep.py): `.gitignore` (and `.ignore`, git's
exclude file) honoured, hidden files included, `.git` never, symlinks not followed. The
pattern is anchored at the searched folder, as a shell glob is: `*.py` is the folder's own
Python files, `**/*.py` every one beneath it, `src/**/test_*.py` those under `src`.

The pattern is not given to rg as `--glob`: rg lets a `--glob` match override .gitignore (an
ignored `debug.log` would be listed for `*`). It becomes an extended regex (`glob_regex`)
that `grep -E` applies to rg's listing, in the same sandboxed pipeline, before `head` cuts it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.ripgrep import in_workspace, run_rg, search_folder

GLOB_MAX_RESULTS = 1000


class GlobInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    pattern: str = Field(
        min_length=1,
        max_length=1000,
        description="A glob relative to `path`: `*` within a folder, `**` across folders "
        "(e.g. `**/*.py`, `src/**/test_*.ts`, `*.md`).",
    )
    path: str | None = Field(default=None, description="Folder to search in (default: the workspace).")


def glob_files(args: GlobInput, ctx: ToolContext) -> ToolOutput:
    if "\x00" in args.pattern or args.pattern.startswith("!"):
        raise ToolError("pattern must be a glob without NUL bytes and without a leading `!`")
    folder = search_folder(ctx, args.path)
    regex = glob_regex(args.pattern.removeprefix("./").lstrip("/"))
    found = run_rg(ctx, folder, ["--files", "--sortr=modified"], GLOB_MAX_RESULTS, keep=regex)
    where = folder or "the workspace"
    if not found.lines:
        return ToolOutput(f"No files match {args.pattern!r} in {where} (.gitignore'd files are skipped).")
    paths = [in_workspace(folder, line) for line in found.lines]
    body = "\n".join(paths)
    if found.cut:
        body += (
            f"\n[... more files match: only the {GLOB_MAX_RESULTS} newest are listed; narrow the pattern "
            "or the path ...]"
        )
    return ToolOutput(body)


_ERE_SPECIAL = frozenset(".^$+()|\\{}")


def glob_regex(pattern: str) -> str:
    """The POSIX extended regex matching the paths `pattern` matches (`**/` any folders, `*`
    and `?` within one name, `[...]` and `[!...]` classes, `{a,b}` alternatives)."""
    out: list[str] = ["^"]
    i, depth = 0, 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end + 1
            continue
        elif char == "{":
            depth += 1
            out.append("(")
        elif char == "}" and depth:
            depth -= 1
            out.append(")")
        elif char == "," and depth:
            out.append("|")
        else:
            out.append("\\" + char if char in _ERE_SPECIAL or char in "[]*?" else char)
        i += 1
    out.append(")" * depth + "$")
    return "".join(out)


GLOB = Tool(
    "Glob",
    "Find files by path pattern (`**/*.py`, `src/**/*.ts`), newest first, skipping what "
    f".gitignore ignores; at most {GLOB_MAX_RESULTS} paths. Use it to find files by name; use "
    "Grep to find text in files.",
    GlobInput,
    glob_files,
)
