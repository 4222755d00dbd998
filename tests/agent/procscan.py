"""Finding processes by a marker in their command line, in this host's /proc (the PIDs a
command prints inside its own PID namespace mean nothing out here)."""

from __future__ import annotations

import time
from pathlib import Path


def processes_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
    """The processes with `marker` still alive after up to `seconds` (normally: none)."""
    deadline = time.monotonic() + seconds
    while (left := processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def environ_and_cmdline(pid: int) -> bytes:
    """What /proc shows of a process's environment block and argument list (b"" once gone)."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes() + Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""
