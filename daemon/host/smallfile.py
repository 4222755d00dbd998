"""Reading a small file an agent may have written (SPEC §4.7 v4): never blocking, regular
files only, capped. A FIFO, a device, a folder or a symlink at the last step reads as None,
at once: no thread of WorkTrain waits on what the agent left (issue 29, finding 6)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_BYTES = 4096


def read_small(path: Path, cap: int = MAX_BYTES) -> bytes | None:
    """Up to `cap` bytes of the regular file `path`; None for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, cap)
    except OSError:
        return None
    finally:
        os.close(fd)


def first_line(path: Path) -> str:
    """The first line of a small regular file, stripped ("" for anything else)."""
    data = read_small(path)
    lines = data.decode(errors="replace").splitlines() if data else []
    return lines[0].strip() if lines else ""
