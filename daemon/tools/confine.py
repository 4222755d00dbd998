"""Opening a path inside a workspace without ever leaving it (README's Coding sessions, Read and Write).

Checking a path and then opening it leaves a window: a directory swapped for a symlink in
between (`renameat2(RENAME_EXCHANGE)`) sends the open elsewhere. So nothing here checks a
path string. `open_beneath` walks it one component at a time from a descriptor of the
workspace, each step `openat(dir_fd, name, O_NOFOLLOW)` relative to the directory opened
by the step before; the kernel never follows a symlink. A symlink met on the way is read
(`readlinkat`) and its target walked the same way, from the directories already held (or
from the workspace, for an absolute target inside it): a link that stays inside works, one
that points out is refused. `..` returns to the directory held one level up — never the kernel's idea of
the parent of a directory that may have moved. Whatever is swapped in meanwhile, every
step is relative to a descriptor inside the workspace, so the walk ends inside it or fails.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_SYMLINKS = 40  # as the kernel's own limit (ELOOP)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Escape(Exception):
    """The path leaves the workspace (or cannot be walked safely): the message says how."""


@dataclass(frozen=True)
class Opened:
    fd: int
    relative: str  # the path walked, relative to the workspace ("." for the workspace itself)
    status: os.stat_result


def _components(raw: str, root: Path) -> list[str]:
    if not raw or "\x00" in raw:
        raise Escape("path must be a non-empty string without NUL bytes")
    if os.path.isabs(raw):
        absolute = os.path.normpath(raw)
        for base in dict.fromkeys((os.path.normpath(root), os.path.realpath(root))):
            if absolute == base or absolute.startswith(base.rstrip("/") + "/"):
                raw = os.path.relpath(absolute, base)
                break
        else:
            real = os.path.realpath(root)
            raise Escape(f"{raw!r} is outside the workspace ({real}); only paths inside it are allowed")
    return [part for part in raw.split("/") if part not in ("", ".")]


@contextlib.contextmanager
def open_beneath(
    root: Path,
    raw: str,
    flags: int = os.O_RDONLY,
    mode: int = 0o666,
    create_parents: bool = False,
    forbidden: Collection[tuple[int, int]] = (),
) -> Iterator[Opened]:
    """The file (or directory) `raw` names inside `root`, opened with `flags`
    (O_NOFOLLOW and O_CLOEXEC added; O_CREAT honoured for the last component); closed after
    the block. `forbidden`: (st_dev, st_ino) of directories and files never walked through
    nor opened (the data dir, the user's credentials: checked on each descriptor held, before
    the next step — so before anything is created in one). Raises Escape, or OSError (not
    found, permissions, not a directory, ...)."""
    parts = _components(raw, root)
    stack = [os.open(root, _DIR_FLAGS)]
    names: list[str] = []
    links = 0
    try:
        _refuse_forbidden(stack[0], raw, forbidden)
        while parts:
            name = parts.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise Escape(f"{raw!r} leads outside the workspace (through `..`)")
                os.close(stack.pop())
                names.pop()
                continue
            last = not parts
            try:
                if last:
                    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=stack[-1])
                else:
                    fd = _open_dir(name, stack[-1], create_parents)
            except OSError as exc:
                target = _symlink_target(exc, name, stack[-1])
                if target is None:
                    raise
                links += 1
                if links > MAX_SYMLINKS:
                    raise Escape(f"{raw!r} goes through too many symlinks") from None
                if target.startswith("/"):  # walked again from the workspace, if it is inside
                    try:
                        target_parts = _components(target, root)
                    except Escape:
                        raise Escape(f"{raw!r} goes through a symlink to outside the workspace") from None
                    while len(stack) > 1:
                        os.close(stack.pop())
                    names.clear()
                else:
                    target_parts = [part for part in target.split("/") if part not in ("", ".")]
                parts[:0] = target_parts
                continue
            try:
                _refuse_forbidden(fd, raw, forbidden)
            except Escape:
                os.close(fd)
                raise
            if last:
                try:
                    yield Opened(fd, "/".join([*names, name]), os.fstat(fd))
                finally:
                    os.close(fd)
                return
            stack.append(fd)
            names.append(name)
        # The path ended on a directory already held (`.`, `a/..`, or the workspace itself).
        fd = os.dup(stack[-1])
        try:
            yield Opened(fd, "/".join(names) or ".", os.fstat(fd))
        finally:
            os.close(fd)
    finally:
        for held in stack:
            os.close(held)


def _refuse_forbidden(fd: int, raw: str, forbidden: Collection[tuple[int, int]]) -> None:
    """Escape when `fd` is a forbidden directory or file."""
    if not forbidden:
        return
    status = os.fstat(fd)
    if (status.st_dev, status.st_ino) in forbidden:
        raise Escape(
            f"{raw!r} is in WorkTrain's data dir or among this user's credentials; never read or written"
        )


def _open_dir(name: str, dir_fd: int, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o777, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _symlink_target(exc: OSError, name: str, dir_fd: int) -> str | None:
    """The target of `name` when opening it failed because it is a symlink, else None."""
    if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
        return None
    try:
        if not stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
            return None
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None
