"""Standalone console (README's Console): events and issues read from the JSONL mirrors, no Redis.

Files: `<data>/events/YYYY-MM-DD.jsonl` (one per UTC day) and `<data>/issues/<sessionId>.jsonl`.
Cursors are opaque strings naming a line: `YYYY-MM-DD:<line>` for events,
`<sessionId>:<line>` for issues (lines count from 1). `since=<cursor>` answers what comes
after that line. Issues of all sessions are merged in timestamp order.
A line that is not a JSON object is skipped with a warning: a mirror is written by
processes that may have died mid-line, and one bad line must not hide the rest.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from daemon.bus.streams.eventsink import events_jsonl_path
from daemon.bus.streams.issues import issue_jsonl_path
from daemon.host.ids import SESSION_ID_RE, is_session_id
from web.readers import Page

log = logging.getLogger(__name__)

DAY_FILE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_SESSION_ID = SESSION_ID_RE.pattern.removeprefix("^").removesuffix("$")
# ASCII digits only: `\d` would also take other scripts' digits, which int() reads as numbers.
CURSOR_RE = re.compile(rf"^(\d{{4}}-\d{{2}}-\d{{2}}|{_SESSION_ID}):(\d{{1,12}})$", re.ASCII)


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    value = json.loads(raw)
                except ValueError:
                    log.warning("%s:%d is not JSON; skipped", path, number)
                    continue
                if isinstance(value, dict):
                    yield number, value
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc)


def _sort_key(cursor: str) -> tuple[str, int]:
    name, _, line = cursor.rpartition(":")
    return name, int(line)


class JsonlReader:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir

    def valid_cursor(self, cursor: str) -> bool:
        return cursor in ("", "0") or CURSOR_RE.fullmatch(cursor) is not None

    def events_page(self, session_id: str | None, since: str, limit: int) -> Page:
        after = _sort_key(since) if since not in ("", "0") else ("", 0)
        items: list[dict[str, Any]] = []
        every = events_jsonl_path(self.data_dir, "*")
        days = sorted(p for p in every.parent.glob(every.name) if DAY_FILE_RE.match(p.stem))
        for path in days:
            if path.stem < after[0]:
                continue
            for number, event in _lines(path):
                if (path.stem, number) <= after:
                    continue
                if session_id is not None and event.get("sessionId") != session_id:
                    continue
                items.append({"id": f"{path.stem}:{number}", **event})
                if len(items) == limit:
                    return Page(items, items[-1]["id"])
        return Page(items, items[-1]["id"] if items else since)

    def issues_page(self, session_id: str | None, since: str, limit: int) -> Page:
        if session_id is not None:
            paths = [issue_jsonl_path(self.data_dir, session_id)]
        else:
            every = issue_jsonl_path(self.data_dir, "sess_*")  # the mirrors' folder and names, as a glob
            paths = sorted(p for p in every.parent.glob(every.name) if is_session_id(p.stem))
        merged = [
            {"id": f"{path.stem}:{number}", **issue}
            for path in paths
            if path.is_file()
            for number, issue in _lines(path)
        ]
        merged.sort(key=lambda item: (str(item.get("ts", "")), _sort_key(item["id"])))
        start = 0
        if since not in ("", "0"):
            ids = [item["id"] for item in merged]
            start = ids.index(since) + 1 if since in ids else len(merged)
        page = merged[start : start + limit]
        return Page(page, page[-1]["id"] if page else since)
