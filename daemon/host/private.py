"""Owner-only folders and files for the data dir (docs/security.md): 0700 folders, 0600 files.

The data dir holds the Redis AOF and password, logs, and the JSONL mirrors (steer texts,
goals): nothing in it is for other users. Modes are given explicitly rather than through
the process umask, so that files an agent writes in a workspace keep the user's umask.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """`path` as a folder, created (with any missing parent) owner-only; returns it.

    A folder that already exists keeps its mode, except `path` itself, which is narrowed to
    0700 when it is ours and wider (a data dir created by an older version)."""
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        stat = path.stat()
        if stat.st_mode & 0o077 and stat.st_uid == os.geteuid():
            os.chmod(path, DIR_MODE)
    except FileNotFoundError:
        private_dir(path.parent)
        with contextlib.suppress(FileExistsError):  # created meanwhile by another process
            os.mkdir(path, DIR_MODE)
    return path


def open_private(path: Path, flags: int) -> int:
    """os.open with O_CREAT and mode 0600 (the folder is made owner-only too)."""
    private_dir(path.parent)
    return os.open(path, flags | os.O_CREAT, FILE_MODE)
