"""`Read` and `Write` (SPEC §4.3): paths resolve inside the workspace, or the call is an error.

Every path is walked from the workspace one component at a time (daemon/tools/confine.py):
no window between a check and the open, symlinks followed only while they stay inside,
`..` never past the workspace. What is opened must be a regular file with one link (a
hard link to a file outside would otherwise be read or overwritten through it); a FIFO,
socket or device is refused at once (opened non-blocking, never read). Read reads only
the lines it returns (and one more, to say whether more follow), each line capped.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.confine import Escape, Opened, open_beneath

READ_DEFAULT_LINES = 2000
READ_MAX_CHARS = 100_000
MAX_LINE_BYTES = 20_000  # longer lines are cut (and said to be)
BINARY_SNIFF_BYTES = 8192
LIST_MAX_ENTRIES = 500
_SPECIAL = os.O_NONBLOCK | os.O_NOCTTY  # a FIFO or a terminal never blocks nor adopts us


def _refuse_special(raw: str, opened: Opened, verb: str) -> None:
    mode = opened.status.st_mode
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise ToolError(f"{raw!r} is {kind}, not a regular file; {verb} only handles regular files")
    if opened.status.st_nlink > 1:
        raise ToolError(
            f"{raw!r} has {opened.status.st_nlink} hard links; {verb} refuses hard-linked files "
            "(another name of it may be outside the workspace)"
        )


def _os_error(raw: str, exc: OSError, verb: str) -> ToolError:
    if isinstance(exc, FileNotFoundError):
        return ToolError(f"{raw!r} does not exist")
    if isinstance(exc, IsADirectoryError):
        return ToolError(f"{raw!r} is a directory")
    if isinstance(exc, NotADirectoryError):
        return ToolError(f"a component of {raw!r} is not a directory")
    return ToolError(f"cannot {verb} {raw!r}: {exc.strerror}")


class ReadInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="File (or directory) path, relative to the workspace.")
    offset: int | None = Field(default=None, ge=1, description="First line to read (1-based).")
    limit: int | None = Field(
        default=None, ge=1, description=f"Lines to read (default {READ_DEFAULT_LINES})."
    )


def read_file(args: ReadInput, ctx: ToolContext) -> ToolOutput:
    try:
        with open_beneath(ctx.workspace, args.path, os.O_RDONLY | _SPECIAL) as opened:
            if stat.S_ISDIR(opened.status.st_mode):
                return ToolOutput(_listing(opened))
            _refuse_special(args.path, opened, "Read")
            with os.fdopen(os.dup(opened.fd), "rb") as handle:
                return ToolOutput(_read_lines(args, handle, opened.status.st_size))
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise _os_error(args.path, exc, "read") from None


def _read_lines(args: ReadInput, handle: BinaryIO, size: int) -> str:
    head = handle.read(BINARY_SNIFF_BYTES)
    if b"\x00" in head:
        return f"{args.path} is a binary file ({size} bytes); not shown."
    handle.seek(0)
    start = (args.offset or 1) - 1
    wanted = args.limit or READ_DEFAULT_LINES
    chosen: list[str] = []
    number, chars, more = 0, 0, False
    while True:
        line, cut = _line(handle)
        if line is None:
            break
        number += 1
        if number <= start:
            continue
        if len(chosen) == wanted or chars > READ_MAX_CHARS:
            more = True
            break
        text = line.decode("utf-8", errors="replace") + (" [... line cut ...]" if cut else "")
        chosen.append(f"{number:6d}\t{text}")
        chars += len(text)
    if not chosen:
        return (
            f"{args.path} is empty."
            if number == 0
            else f"{args.path} has {number} lines; none from {start + 1}."
        )
    body = "\n".join(chosen)
    if len(body) > READ_MAX_CHARS:
        body = body[:READ_MAX_CHARS] + f"\n[... output cut at {READ_MAX_CHARS} characters ...]"
    shown_to = start + len(chosen)
    if more:
        body += f"\n[lines {start + 1}-{shown_to}; more follow: use offset={shown_to + 1}]"
    elif start > 0:
        body += f"\n[lines {start + 1}-{shown_to} of {shown_to}]"
    return body


def _line(handle: BinaryIO) -> tuple[bytes | None, bool]:
    """The next line without its newline (None at the end), and whether it was cut."""
    line = handle.readline(MAX_LINE_BYTES + 1)
    if not line:
        return None, False
    if line.endswith(b"\n"):
        return line.rstrip(b"\r\n"), False
    if len(line) <= MAX_LINE_BYTES:
        return line, False  # the last line, without a newline
    while (rest := handle.readline(65536)) and not rest.endswith(b"\n"):
        pass  # skip the rest of an overlong line without keeping it
    return line[:MAX_LINE_BYTES], True


def _listing(opened: Opened) -> str:
    with os.scandir(opened.fd) as scan:
        entries = sorted(scan, key=lambda e: e.name)
    names = [e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in entries[:LIST_MAX_ENTRIES]]
    more = (
        f"\n[... {len(entries) - LIST_MAX_ENTRIES} more entries ...]"
        if len(entries) > LIST_MAX_ENTRIES
        else ""
    )
    return f"Directory {opened.relative}:\n" + "\n".join(names) + more


class WriteInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="File path, relative to the workspace. Parent folders are created.")
    content: str = Field(description="The whole new content of the file.")


def write_file(args: WriteInput, ctx: ToolContext) -> ToolOutput:
    data = args.content.encode()
    flags = os.O_WRONLY | os.O_CREAT | _SPECIAL
    ctx.guard()  # the last step before the file (or its folders) may be created (SPEC §6 v3)
    try:
        with open_beneath(ctx.workspace, args.path, flags, 0o644, create_parents=True) as opened:
            _refuse_special(args.path, opened, "Write")
            os.ftruncate(opened.fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(opened.fd, view) :]
            relative = opened.relative
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise _os_error(args.path, exc, "write") from None
    return ToolOutput(f"Wrote {len(data)} bytes to {relative}.")


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
