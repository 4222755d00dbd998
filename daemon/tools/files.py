"""`Read` and `Write` (SPEC §4.3): paths resolve inside the workspace, or the call is an error.

A path is resolved with every symlink followed and every `..` applied (`os.path.realpath`)
and must land inside the real workspace directory; anything else — `../x`, `/etc/passwd`,
a symlink pointing out — is refused before a byte is read or written. The final open uses
O_NOFOLLOW so a symlink swapped in after the check is refused too.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput

READ_DEFAULT_LINES = 2000
READ_MAX_CHARS = 100_000
LIST_MAX_ENTRIES = 500


def resolve_inside(workspace: Path, raw: str) -> Path:
    """The real path `raw` names, which must be inside the workspace; else ToolError."""
    if not raw or "\x00" in raw:
        raise ToolError("path must be a non-empty string without NUL bytes")
    root = Path(os.path.realpath(workspace))
    candidate = Path(raw) if os.path.isabs(raw) else root / raw
    resolved = Path(os.path.realpath(candidate))
    if resolved != root and root not in resolved.parents:
        raise ToolError(f"{raw!r} is outside the workspace ({root}); only paths inside it are allowed")
    return resolved


def _relative(workspace: Path, path: Path) -> str:
    root = Path(os.path.realpath(workspace))
    return str(path.relative_to(root)) if path != root else "."


class ReadInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="File (or directory) path, relative to the workspace.")
    offset: int | None = Field(default=None, ge=1, description="First line to read (1-based).")
    limit: int | None = Field(
        default=None, ge=1, description=f"Lines to read (default {READ_DEFAULT_LINES})."
    )


def read_file(args: ReadInput, ctx: ToolContext) -> ToolOutput:
    path = resolve_inside(ctx.workspace, args.path)
    if path.is_dir():
        return ToolOutput(_listing(ctx.workspace, path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ToolError(f"{args.path!r} does not exist") from None
    except OSError as exc:
        raise ToolError(f"cannot read {args.path!r}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read()
    if b"\x00" in data[:8192]:
        return ToolOutput(f"{args.path} is a binary file ({len(data)} bytes); not shown.")
    lines = data.decode("utf-8", errors="replace").splitlines()
    start = (args.offset or 1) - 1
    chosen = lines[start : start + (args.limit or READ_DEFAULT_LINES)]
    body = "\n".join(f"{start + i + 1:6d}\t{line}" for i, line in enumerate(chosen))
    if len(body) > READ_MAX_CHARS:
        body = body[:READ_MAX_CHARS] + f"\n[... output cut at {READ_MAX_CHARS} characters ...]"
    shown_to = start + len(chosen)
    if shown_to < len(lines) or start > 0:
        body += f"\n[lines {start + 1}-{shown_to} of {len(lines)}; use offset/limit for more]"
    return ToolOutput(body if lines else f"{args.path} is empty.")


def _listing(workspace: Path, folder: Path) -> str:
    entries = sorted(folder.iterdir(), key=lambda p: p.name)
    names = [p.name + ("/" if p.is_dir() else "") for p in entries[:LIST_MAX_ENTRIES]]
    more = (
        f"\n[... {len(entries) - LIST_MAX_ENTRIES} more entries ...]"
        if len(entries) > LIST_MAX_ENTRIES
        else ""
    )
    return f"Directory {_relative(workspace, folder)}:\n" + "\n".join(names) + more


class WriteInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="File path, relative to the workspace. Parent folders are created.")
    content: str = Field(description="The whole new content of the file.")


def write_file(args: WriteInput, ctx: ToolContext) -> ToolOutput:
    path = resolve_inside(ctx.workspace, args.path)
    if path.is_dir():
        raise ToolError(f"{args.path!r} is a directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = args.content.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise ToolError(f"cannot write {args.path!r}: {exc.strerror}") from None
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return ToolOutput(f"Wrote {len(data)} bytes to {_relative(ctx.workspace, path)}.")


READ = Tool(
    "Read",
    "Read a text file in the workspace, with line numbers (or list a directory). "
    "Use offset and limit for long files.",
    ReadInput,
    read_file,
)
WRITE = Tool(
    "Write",
    "Write a file in the workspace (creates or replaces it, and its parent folders).",
    WriteInput,
    write_file,
)
