"""One `worktrain up` per data dir: an flock'd lock file plus a state file next to it.

The lock (`<data>/up.lock`) is held for the supervisor's whole life and released by the
kernel when it exits, however it exits, so a stale lock never blocks a restart. The state
file (`<data>/up.json`: pid, API URL, Redis URL, redis-cli line) tells a second `up` what is
running, and lets client commands find the API without WORKTRAIN_URL. Both are owner-only,
and the state names no password.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Any

from daemon.host.private import open_private


class AlreadyRunning(Exception):
    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state
        pid = state.get("pid", "?")
        url = state.get("apiUrl", "?")
        super().__init__(f"WorkTrain is already running on this data dir (pid {pid}, API {url})")


class RunLock:
    def __init__(self, data_dir: Path) -> None:
        self.lock_path = data_dir / "up.lock"
        self.state_path = data_dir / "up.json"
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise AlreadyRunning with the running supervisor's state."""
        fd = open_private(self.lock_path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise AlreadyRunning(self.read_state()) from None
        self._fd = fd

    def read_state(self) -> dict[str, Any]:
        try:
            state = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def write_state(self, state: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        fd = open_private(tmp, os.O_WRONLY | os.O_TRUNC)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.state_path)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self.state_path.unlink()
        os.close(self._fd)  # closing the descriptor releases the flock
        self._fd = None
