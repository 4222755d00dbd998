"""`Edit` (README's Coding sessions, v3 tools): replace an exact string in a file of the workspace.

The agent changes a line without rewriting the file. Exact means exact: no regex, no
whitespace folding, no line-number prefixes (text copied from Read's output with its
`     12<TAB>` prefix is refused with a hint). Without `replace_all` the string must occur
exactly once — an ambiguous edit is an error that says how many times it occurs, so the
model adds context instead of changing the wrong place. The file is opened like Read and
Write (daemon/tools/confine.py) and must be fresh in the session's ledger: read since it
last changed (daemon/tools/ledger.py).
"""

from __future__ import annotations

import os
import re
import stat

from pydantic import BaseModel, ConfigDict, Field

from daemon.sandbox.roots import private_inodes
from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.confine import Escape, open_beneath
from daemon.tools.files import check_fresh, os_error, refuse_read_only, refuse_special, replace_content
from daemon.tools.ledger import stamp_of_bytes

EDIT_MAX_BYTES = 8 << 20
_LINE_PREFIX = re.compile(r"^\s*\d+\t", re.MULTILINE)


class EditInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    path: str = Field(description="File path, relative to the workspace. Read it first.")
    old_string: str = Field(
        min_length=1,
        description="The exact text to replace, as it is in the file (without Read's line-number "
        "prefixes). Include enough surrounding lines to make it unique.",
    )
    new_string: str = Field(description="The text to put in its place (must differ from old_string).")
    replace_all: bool = Field(
        default=False, description="Replace every occurrence (default: old_string must occur exactly once)."
    )


def edit_file(args: EditInput, ctx: ToolContext) -> ToolOutput:
    refuse_read_only(ctx, "Edit")
    if args.old_string == args.new_string:
        raise ToolError("old_string and new_string are identical: there is nothing to change")
    try:
        with open_beneath(
            ctx.workspace, args.path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY, forbidden=private_inodes()
        ) as opened:
            refuse_special(args.path, opened, "Edit")
            if opened.status.st_size > EDIT_MAX_BYTES:
                raise ToolError(
                    f"{args.path!r} is larger than {EDIT_MAX_BYTES} bytes; Edit does not change it"
                )
            check_fresh(ctx, opened)
            data = _read_all(opened.fd, opened.status)
            updated, count = _replaced(args, data.decode("utf-8", errors="surrogateescape"))
            encoded = updated.encode("utf-8", errors="surrogateescape")
            ctx.guard()  # the last step before the file changes (docs/durability.md)
            replace_content(opened.fd, encoded)
            relative = opened.relative
    except Escape as exc:
        raise ToolError(str(exc)) from None
    except OSError as exc:
        raise os_error(args.path, exc, "edit") from None
    ctx.files.mark(relative, stamp_of_bytes(encoded))
    times = "1 occurrence" if count == 1 else f"{count} occurrences"
    return ToolOutput(f"Edited {relative}: replaced {times}.")


def _read_all(fd: int, status: os.stat_result) -> bytes:
    assert stat.S_ISREG(status.st_mode)
    chunks = []
    offset = 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _replaced(args: EditInput, text: str) -> tuple[str, int]:
    """The text after the edit, and how many occurrences were replaced; or ToolError."""
    count = text.count(args.old_string)
    if count == 0:
        hint = (
            " It looks like it carries Read's line-number prefixes: remove them."
            if _LINE_PREFIX.search(args.old_string)
            else " Read the file again and copy the text exactly (whitespace and indentation included)."
        )
        raise ToolError(f"old_string was not found in {args.path}.{hint}")
    if count > 1 and not args.replace_all:
        raise ToolError(
            f"old_string occurs {count} times in {args.path}; it must occur exactly once. "
            "Add surrounding lines to make it unique, or set replace_all to replace every occurrence."
        )
    return text.replace(args.old_string, args.new_string), count


EDIT = Tool(
    "Edit",
    "Replace an exact string in a file of the workspace. old_string must occur exactly once "
    "(unless replace_all) and match the file exactly, without Read's line-number prefixes. "
    "Read the file first: a file changed since you last read it is refused.",
    EditInput,
    edit_file,
)
