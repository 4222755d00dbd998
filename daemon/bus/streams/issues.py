"""Issues reported by agents (README's Coding sessions `report_issue`): a Redis stream and a JSONL mirror.

Each issue is appended to the stream `wt:issues` (trimmed `MAXLEN ~`; field `data` holds
the issue JSON, plus `sessionId`, `severity`, `kind` and `summary` for `redis-cli` readers)
and to `<data>/issues/<sessionId>.jsonl`. Recording is fire-and-forget: each sink failing
alone (Redis down, a full or read-only disk) is logged and the other still lands; nothing
here raises to the agent.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import redis

from daemon.bus.keys import Keys
from daemon.bus.streams.eventsink import STREAM_FIELD, append_jsonl
from daemon.schema.issues import Issue

log = logging.getLogger(__name__)

ISSUES_STREAM_MAXLEN = 100_000


def issue_jsonl_path(data_dir: Path, session_id: str) -> Path:
    """The JSONL mirror of one session's issues (read back by web/standalone.py)."""
    return data_dir / "issues" / f"{session_id}.jsonl"


@dataclass(frozen=True)
class IssueWrite:
    """Which sinks took the issue."""

    stream: bool
    jsonl: bool


class IssueSink:
    def __init__(
        self,
        client: redis.Redis | None,
        keys: Keys,
        data_dir: Path | None,
        maxlen: int = ISSUES_STREAM_MAXLEN,
    ) -> None:
        self.client = client
        self.keys = keys
        self.data_dir = data_dir
        self.maxlen = maxlen

    def record(self, issue: Issue) -> IssueWrite:
        line = issue.model_dump_json()
        return IssueWrite(stream=self._to_stream(issue, line), jsonl=self._to_jsonl(issue, line))

    def jsonl_path(self, session_id: str) -> Path | None:
        return None if self.data_dir is None else issue_jsonl_path(self.data_dir, session_id)

    def _to_stream(self, issue: Issue, line: str) -> bool:
        if self.client is None:
            return False
        fields = {
            STREAM_FIELD: line,
            "sessionId": issue.sessionId,
            "severity": issue.severity,
            "kind": issue.kind,
            "summary": issue.summary,
        }
        try:
            self.client.xadd(self.keys.issues, fields, maxlen=self.maxlen, approximate=True)  # type: ignore[arg-type]
        except redis.RedisError as exc:
            log.warning("issue not written to Redis (%s): %s", exc, line[:500])
            return False
        return True

    def _to_jsonl(self, issue: Issue, line: str) -> bool:
        path = self.jsonl_path(issue.sessionId)
        if path is None:
            return False
        try:
            append_jsonl(path, [line])
        except OSError as exc:
            log.warning("issue not written to %s (%s): %s", path, exc, line[:500])
            return False
        return True
