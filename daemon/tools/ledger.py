"""What this session has read, so `Write` and `Edit` never overwrite a change they did not see
(README's Coding sessions, v3 tools).

`Read` marks a file with a stamp of it as it was read; `Write` and `Edit` refuse an existing
file that has no mark, or whose content changed since the mark ("read it again"), and mark
what they wrote. A stamp is the file's SHA-256 (up to `HASH_MAX_BYTES`; content is what
matters, and a change within one timestamp tick would slip past a stat), or, for a larger
file, its inode, size, mtime and ctime (ctime cannot be set back by a user).

The ledger is checkpointed with the history (the record field `readFiles`, written by every
checkpoint with the step position): a resumed attempt has the marks that match the history
it resumes, so a file the model saw before a crash is still editable after it, and one that
changed meanwhile is still refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

HASH_MAX_BYTES = 8 << 20
MAX_MARKS = 2000  # the checkpoint stays small: the oldest marks go first (a re-read restores one)
_CHUNK = 1 << 16


def stamp_of(fd: int, status: os.stat_result) -> str:
    """The stamp of the open regular file `fd` (read from offset 0, position restored)."""
    if status.st_size > HASH_MAX_BYTES:
        return f"stat:{status.st_ino}:{status.st_size}:{status.st_mtime_ns}:{status.st_ctime_ns}"
    digest = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        digest.update(chunk)
        offset += len(chunk)
    return "sha256:" + digest.hexdigest()


def stamp_of_bytes(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


STALE = "{path} changed on disk since you last read it: read it again before you change it."
UNREAD = "{path} exists and you have not read it in this session: read it first (Read), then change it."


@dataclass
class FileLedger:
    """Workspace-relative path → the stamp of the file when this session last saw it."""

    marks: dict[str, str] = field(default_factory=dict)

    def mark(self, path: str, stamp: str) -> None:
        self.marks.pop(path, None)
        self.marks[path] = stamp  # re-inserted: the newest marks are kept when trimming
        while len(self.marks) > MAX_MARKS:
            del self.marks[next(iter(self.marks))]

    def problem(self, path: str, current: str) -> str | None:
        """Why an existing file with stamp `current` must not be changed now (None: it may)."""
        known = self.marks.get(path)
        if known is None:
            return UNREAD.format(path=path)
        if known != current:
            return STALE.format(path=path)
        return None

    def to_json(self) -> str:
        return json.dumps(self.marks, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | None) -> FileLedger:
        """From the record's `readFiles` (None or unreadable: an empty ledger, said in the log)."""
        if not raw:
            return cls()
        try:
            loaded = json.loads(raw)
        except ValueError:
            log.warning("readFiles in the record is not JSON; starting with no file marks")
            return cls()
        if not isinstance(loaded, dict):
            log.warning("readFiles in the record is not an object; starting with no file marks")
            return cls()
        return cls({str(k): str(v) for k, v in loaded.items()})
