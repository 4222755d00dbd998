"""How client commands print: rich tables for people, JSON for scripts.

rich is imported inside the functions that draw a table, so a command that prints one line
(`worktrain steer`) never pays for it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any


def print_json(value: Any) -> None:
    """A whole response, pretty-printed (the server's body as it came)."""
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_json_line(value: Any) -> None:
    """One entry of a followed stream: one compact JSON object per line (JSON Lines)."""
    sys.stdout.write(json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    sys.stderr.write(f"worktrain: error: {message}\n")
    sys.stderr.flush()


def info_line(message: str) -> None:
    """A hint for people, on stderr so that stdout stays what scripts read."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def short_time(value: Any) -> str:
    """`2025-01-02T03:04:05.678Z` -> `2025-01-02 03:04:05` (tables only)."""
    if not isinstance(value, str) or "T" not in value:
        return cell(value)
    day, _, clock = value.partition("T")
    return f"{day} {clock[:8]}"


def _console() -> Any:
    from rich.console import Console

    # Piped output keeps whole lines: rich would otherwise wrap at 80 columns.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False)


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None, empty: str = ""
) -> None:
    from rich import box
    from rich.table import Table

    materialized = [[cell(value) for value in row] for row in rows]
    if not materialized and empty:
        info_line(empty)
        return
    table = Table(*columns, title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for row in materialized:
        table.add_row(*row)
    _console().print(table)


def print_fields(pairs: Iterable[tuple[str, Any]], title: str | None = None) -> None:
    """A two-column table of one record's fields."""
    from rich import box
    from rich.table import Table

    table = Table(show_header=False, box=box.SIMPLE, title=title, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in pairs:
        table.add_row(key, cell(value))
    _console().print(table)


_EVENT_DETAIL_SKIP = frozenset({"kind", "sessionId", "ts", "turnId", "id"})


def event_line(event: dict[str, Any]) -> str:
    """`03:04:05 sess_…XYZW  turn 2  steer_delivered  offsets=[1, 2]` for one event."""
    ts = event.get("ts")
    clock = ts.partition("T")[2][:8] if isinstance(ts, str) else "--:--:--"
    session = str(event.get("sessionId") or "-")
    short = f"…{session[-6:]}" if session.startswith("sess_") else session
    turn = f"turn {event['turnId']}" if isinstance(event.get("turnId"), int) else ""
    details = " ".join(
        f"{key}={cell(value)}" for key, value in event.items() if key not in _EVENT_DETAIL_SKIP
    )
    return f"{clock} {short:>8} {turn:>8}  {event.get('kind', '?'):<20} {details}".rstrip()


def issue_line(issue: dict[str, Any]) -> str:
    ts = issue.get("ts")
    clock = short_time(ts) if isinstance(ts, str) else "-"
    where = f"{issue.get('sessionId', '-')} turn {issue.get('turnId', '-')}"
    head = f"{clock} [{issue.get('severity', '?')}] {issue.get('kind', '?')}"
    line = f"{head} {where}: {issue.get('summary', '')}"
    if issue.get("suggestedFix"):
        line += f" (fix: {issue['suggestedFix']})"
    return line
