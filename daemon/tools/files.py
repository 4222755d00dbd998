"""`Read` and `Write` (README's Coding sessions): paths resolve inside the workspace, or the call is an error.

Every path is walked from the workspace one component at a time (daemon/tools/confine.py):
no window between a check and the open, symlinks followed only while they stay inside,
`..` never past the workspace. What is opened must be a regular file with one link (a
hard link to a file outside would otherwise be read or overwritten through it); a FIFO,
socket or device is refused at once (opened non-blocking, never read). Read reads only
the lines it returns (and one more, to say whether more follow), each line capped. Read
marks what it read in the session's ledger (daemon/tools/ledger.py); Write replaces an
existing file only when the ledger says this session has seen its current content, and
refuses everything in a read-only workspace (README's Coding sessions). Neither ever opens nor walks
through WorkTrain's data dir or the user's credential files (daemon/sandbox/roots.py), even
in a workspace that holds them (finding M1).
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict, Field

from daemon.sandbox.roots import private_inodes
from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.confine import Escape, Opened, open_beneath
from daemon.tools.ledger import stamp_of, stamp_of_bytes

READ_DEFAULT_LINES = 2000
READ_MAX_CHARS = 100_000
MAX_LINE_BYTES = 20_000  # longer lines are cut (and said to be)
BINARY_SNIFF_BYTES = 8192
LIST_MAX_ENTRIES = 500
_SPECIAL = os.O_NONBLOCK | os.O_NOCTTY  # a FIFO or a terminal never blocks nor adopts us


def refuse_special(raw: str, opened: Opened, verb: str) -> None:
    mode = opened.status.st_mode
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
        raise ToolError(f"{raw!r} is {kind}, not a regular file; {verb} only handles regular files")
    if opened.status.st_nlink > 1:
        raise ToolError(
            f"{raw!r} has {opened.status.st_nlink} hard links; {verb} refuses hard-linked files "
            "(another name of it may be outside the workspace)"
        )


def os_error(raw: str, exc: OSError, verb: str) -> ToolError:
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
        with open_beneath(
            ctx.workspace, args.path, os.O_RDONLY | _SPECIAL, forbidden=private_inodes()
        ) as opened:
            if stat.S_ISDIR(opened.status.st_mode):
                return ToolOutput(_listing(opened))
            refuse_special(args.path, opened, "Read")
            with os.fdopen(os.dup(opened.fd), "rb") as handle:
                text = _read_lines(args, handle, opened.status.st_size)
            ctx.files.mark(opened.relative, stamp_of(opened.fd, opened.status))
            return ToolOutput(text)
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise os_error(args.path, exc, "read") from None


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
    """One line per entry: name (a folder ends in /), kind, size in bytes (files only)."""
    with os.scandir(opened.fd) as scan:
        entries = sorted(scan, key=lambda e: e.name)
    lines = [_entry_line(entry) for entry in entries[:LIST_MAX_ENTRIES]]
    more = (
        f"\n[... {len(entries) - LIST_MAX_ENTRIES} more entries not listed ...]"
        if len(entries) > LIST_MAX_ENTRIES
        else ""
    )
    header = f"Directory {opened.relative} ({len(entries)} entries; name, kind, size):\n"
    return header + "\n".join(lines) + more


def _entry_line(entry: os.DirEntry[str]) -> str:
    try:
        status = entry.stat(follow_symlinks=False)
    except OSError:  # gone since the scan
        return f"{entry.name}\t(vanished)"
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        return f"{entry.name}/\tdir"
    if stat.S_ISREG(mode):
        return f"{entry.name}\tfile\t{status.st_size}"
    if stat.S_ISLNK(mode):
        return f"{entry.name}\tsymlink -> {_link_target(entry)}"
    return f"{entry.name}\t" + (
        "fifo" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device"
    )


def _link_target(entry: os.DirEntry[str]) -> str:
    try:
        return os.readlink(entry.path)
    except OSError:
        return "?"


class WriteInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="File path, relative to the workspace. Parent folders are created.")
    content: str = Field(description="The whole new content of the file.")


def refuse_read_only(ctx: ToolContext, verb: str) -> None:
    if ctx.read_only:
        raise ToolError(
            f"{verb} refused: this session's workspace is read-only (branchStrategy read-only). "
            "Report what you would change in your notes instead."
        )


def write_file(args: WriteInput, ctx: ToolContext) -> ToolOutput:
    """An existing file is replaced only if this session read it since it last changed; a
    new one is created (O_EXCL: one that appears meanwhile is refused, not overwritten)."""
    refuse_read_only(ctx, "Write")
    data = args.content.encode()
    ctx.guard()  # the last step before the file (or its folders) may change (docs/durability.md)
    try:
        try:
            with open_beneath(
                ctx.workspace, args.path, os.O_RDWR | _SPECIAL, forbidden=private_inodes()
            ) as opened:
                refuse_special(args.path, opened, "Write")
                check_fresh(ctx, opened)
                replace_content(opened.fd, data)
                relative = opened.relative
        except FileNotFoundError:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | _SPECIAL
            with open_beneath(
                ctx.workspace, args.path, flags, 0o644, create_parents=True, forbidden=private_inodes()
            ) as opened:
                replace_content(opened.fd, data)
                relative = opened.relative
    except FileExistsError:
        raise ToolError(
            f"{args.path!r} appeared while it was being written: read it, then write again"
        ) from None
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise os_error(args.path, exc, "write") from None
    ctx.files.mark(relative, stamp_of_bytes(data))
    return ToolOutput(f"Wrote {len(data)} bytes to {relative}.")


def check_fresh(ctx: ToolContext, opened: Opened) -> None:
    """Refuse an existing file this session did not read, or that changed since it did."""
    problem = ctx.files.problem(opened.relative, stamp_of(opened.fd, opened.status))
    if problem is not None:
        raise ToolError(problem)


def replace_content(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    view = memoryview(data)
    offset = 0
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


READ = Tool(
    "Read",
    "Read a text file in the workspace, with line numbers (or list a directory: names, kinds, sizes). "
    "Use offset and limit for long files. Read a file before you Write or Edit it.",
    ReadInput,
    read_file,
)
WRITE = Tool(
    "Write",
    "Write a file in the workspace (creates or replaces it, and its parent folders). An existing "
    "file must have been read (Read) since it last changed; to change part of a file, use Edit.",
    WriteInput,
    write_file,
)


def accept_own_write(raw_input: dict[str, object], ctx: ToolContext) -> None:
    """Before a Write is run again on a resumed turn (docs/durability.md: a Write of the same content
    is idempotent): when the file already holds exactly that content — written by the attempt
    that died before journaling the result — the ledger counts it as read, so the Write
    rewrites the same bytes instead of refusing a file "changed since it was read"."""
    path, content = raw_input.get("path"), raw_input.get("content")
    if not isinstance(path, str) or not isinstance(content, str):
        return  # the Write itself answers its invalid input
    data = content.encode()
    try:
        with open_beneath(ctx.workspace, path, os.O_RDONLY | _SPECIAL, forbidden=private_inodes()) as opened:
            if not stat.S_ISREG(opened.status.st_mode) or opened.status.st_size != len(data):
                return
            if os.pread(opened.fd, len(data) + 1, 0) == data:
                ctx.files.mark(opened.relative, stamp_of(opened.fd, opened.status))
    except (OSError, Escape):
        return  # not there, or not ours to look at: the Write decides
