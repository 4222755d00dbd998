"""Reading a file someone else may have made hostile (docs/security.md): never blocking, regular
files only, never more than a cap.

Where a path is not WorkTrain's own — git metadata in an agent's workspace, the workflows
folder — a plain `open(...).read()` hangs forever on a FIFO (cancel does nothing: the
thread is stuck in the kernel) and reads `/dev/zero` until memory runs out. `read_regular`
opens with `O_NONBLOCK | O_NOCTTY` (a FIFO opens at once and is then refused, a terminal
is never adopted), checks the opened file (not the path: no window between check and
read) is a regular file, and reads at most `limit` bytes: a file longer than that is
refused (`whole=True`, for formats a cut would corrupt, e.g. JSON) or cut there.

Used by daemon/workflows/catalog.py, and meant for every other reader of such files (the
git metadata of a workspace). `daemon/agent/prompt.py` reads AGENTS.md through
`open_beneath`, which adds the walk beneath the workspace on top of the same rules.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class UnsafeFile(OSError):
    """Not a regular file, or longer than the cap: the reason says which."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(
    path: str | Path, limit: int, *, whole: bool = True, dir_fd: int | None = None, follow: bool = True
) -> bytes:
    """At most `limit` bytes of the regular file `path` (relative to `dir_fd` if given).
    `whole`: a longer file raises UnsafeFile instead of being cut. `follow=False`: a symlink
    as the last component is refused (ELOOP). Raises OSError (FileNotFoundError, ...) as
    `open` does, UnsafeFile for a FIFO, device, socket or directory."""
    flags = _FLAGS | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnsafeFile(f"{path}: {_kind(mode)}, not a regular file; not read")
        data = read_up_to(fd, limit + 1 if whole else limit)
    finally:
        os.close(fd)
    if whole and len(data) > limit:
        raise UnsafeFile(f"{path}: larger than {limit} bytes; not read")
    return data


def read_up_to(fd: int, limit: int) -> bytes:
    """At most `limit` bytes of an open file, read in 64 KiB pieces."""
    chunks: list[bytes] = []
    left = limit
    while left > 0 and (chunk := os.read(fd, min(left, 65536))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def first_line(path: str | Path, limit: int = 4096, *, dir_fd: int | None = None) -> str:
    """The first line of a small text file (git's `HEAD`, `commondir`, a `.git` file),
    read as `read_regular` reads, at most `limit` bytes, decoded as UTF-8 (errors replaced)."""
    data = read_regular(path, limit, whole=False, dir_fd=dir_fd)
    return data.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip()


SMALL_BYTES = 4096


def read_small(path: str | Path, cap: int = SMALL_BYTES) -> bytes | None:
    """Up to `cap` bytes of the regular file `path`, a symlink at the last step refused; None
    for anything else (missing, a FIFO, a device, a folder): for callers that treat an
    unreadable file as absent, e.g. git metadata in an agent's workspace (issue 29, item 6)."""
    try:
        return read_regular(path, cap, whole=False, follow=False)
    except OSError:
        return None


def first_line_or_empty(path: str | Path) -> str:
    """The first line of a small regular file, stripped ("" for anything `read_small` refuses)."""
    data = read_small(path)
    return data.split(b"\n", 1)[0].decode("utf-8", errors="replace").strip() if data else ""
