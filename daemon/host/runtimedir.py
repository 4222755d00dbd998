"""WorkTrain's private folder for the files it makes and then reads outside the box
(docs/security.md, "What a WorkTrain process reads outside the box").

A sandboxed command's plan (its grants, read by the launcher before any layer is on), its
private TMPDIR and the repository a push is made from live in `<tempdir>/worktrain-<uid>`,
a 0700 folder of this user, never a symlink. No workspace may be that folder, be inside it
or hold it (daemon/sandbox/roots.py): otherwise a session working in `/tmp` could rewrite
the plan of another session's next command before its launcher reads it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


class RuntimeDirError(RuntimeError):
    """The runtime folder exists but is not a private folder of this user."""


def runtime_path() -> Path:
    return Path(tempfile.gettempdir()) / f"worktrain-{os.geteuid()}"


def runtime_dir() -> Path:
    """The folder, made (0700) if missing; RuntimeDirError when it is not ours alone."""
    path = runtime_path()
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
        raise RuntimeDirError(
            f"{path} is not a folder of this user ({os.geteuid()}): WorkTrain keeps its sandbox plans "
            "there; remove it, or set TMPDIR to a folder only this user can write"
        )
    if stat.S_IMODE(found.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path
