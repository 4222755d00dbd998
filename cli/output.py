"""How client commands print: rich tables for people, JSON for scripts.

rich is imported inside the functions that draw a table, so a command that prints one line
(`worktrain steer`) never pays for it.

Much of what is printed is text an agent wrote (signals, issues, events, steers echoed
back, goals, branch names): a model steered by a prompt injection can put terminal control
sequences in it — clear the screen, set the window title, write the clipboard (OSC 52),
make a link say something else (OSC 8), move the cursor over earlier lines. So every line
goes through `printable` (docs/security.md, issue 29 item 8): each control character shows as
an escape (`ESC` as `\\x1b`), newlines and tabs kept; `say` is the one way a command
prints a line, tables take their cells as plain text (no rich markup read from them), and
JSON escapes the C1 controls and bidirectional overrides its encoder leaves raw.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

# C0 but newline and tab, DEL, C1, and the bidi embeddings/overrides/isolates ("Trojan Source")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_JSON_RAW = re.compile("[\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # what json.dumps leaves as is


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` safe for a terminal: every control character escaped, newlines and tabs kept."""
    return _CONTROL.sub(_escape, text)


def say(text: str, err: bool = False) -> None:
    """Print one line (or several) for people, control characters escaped."""
    stream = sys.stderr if err else sys.stdout
    stream.write(printable(text) + "\n")
    stream.flush()


def _json_text(value: Any, **options: Any) -> str:
    return _JSON_RAW.sub(
        lambda m: f"\\u{ord(m.group()):04x}", json.dumps(value, ensure_ascii=False, **options)
    )


def print_json(value: Any) -> None:
    """A whole response, pretty-printed (the server's body as it came)."""
    sys.stdout.write(_json_text(value, indent=2) + "\n")
    sys.stdout.flush()


def print_json_line(value: Any) -> None:
    """One entry of a followed stream: one compact JSON object per line (JSON Lines)."""
    sys.stdout.write(_json_text(value, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def error_line(message: str) -> None:
    say(f"worktrain: error: {message}", err=True)


def info_line(message: str) -> None:
    """A hint for people, on stderr so that stdout stays what scripts read."""
    say(message, err=True)


def cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return printable(json.dumps(value, ensure_ascii=False))
    return printable(str(value))


def plain(text: str) -> Any:
    """A table cell as rich Text: shown as it is, never read as markup (`[link=...]`)."""
    from rich.text import Text

    return Text(text)


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


# the spaces rich pads a table's lines with, with the style codes around them
_TRAILING = re.compile(r"(?:\x1b\[[0-9;]*m| )+$", re.MULTILINE)
_RESET = "\x1b[0m"


def _unpadded(match: re.Match[str]) -> str:
    """No trailing space; one reset where style codes were dropped (no style bleeds on)."""
    return _RESET if "\x1b" in match.group() else ""


def _print_rendered(renderable: Any) -> None:
    """A rich table printed without the spaces rich pads every line to the table's width with
    (issue 45: they end up in files, diffs and `| grep`), on a terminal and piped alike."""
    console = _console()
    with console.capture() as captured:
        console.print(renderable)
    sys.stdout.write(_TRAILING.sub(_unpadded, captured.get()))
    sys.stdout.flush()


def print_table(
    columns: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None, empty: str = ""
) -> None:
    from rich import box
    from rich.table import Table

    materialized = [[cell(value) for value in row] for row in rows]
    if not materialized and empty:
        info_line(empty)
        return
    table = Table(
        *columns, title=printable(title) if title else None, box=box.SIMPLE_HEAD, title_justify="left"
    )
    for row in materialized:
        table.add_row(*map(plain, row))
    _print_rendered(table)


def print_fields(pairs: Iterable[tuple[str, Any]], title: str | None = None) -> None:
    """A two-column table of one record's fields."""
    from rich import box
    from rich.table import Table

    table = Table(show_header=False, box=box.SIMPLE, title=title, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    for key, value in pairs:
        table.add_row(key, plain(cell(value)))
    _print_rendered(table)


_EVENT_DETAIL_SKIP = frozenset({"kind", "sessionId", "ts", "turnId", "id"})
SAID_PREFIX = "    │ "


def tokens(value: Any) -> str:
    """12345 -> `12.3k`, 4_500_000 -> `4.5M`: token counts at a glance."""
    if not isinstance(value, int) or value < 1000:
        return cell(value)
    if value < 1_000_000:
        return f"{value / 1000:.1f}k"
    return f"{value / 1_000_000:.1f}M"


def _said(text: str) -> str:
    """What the agent said, each line indented under the event's own line."""
    return "".join(f"\n{SAID_PREFIX}{line}" for line in text.splitlines() if line.strip())


def _details(event: dict[str, Any]) -> str:
    """The event's own part of its line: readable for the kinds a person watches, else key=value."""
    kind = event.get("kind")
    if kind == "llm_turn_completed":
        prompt = sum(int(event.get(k) or 0) for k in ("inputTokens", "cacheReadTokens", "cacheWriteTokens"))
        cached, out = tokens(event.get("cacheReadTokens") or 0), tokens(event.get("outputTokens") or 0)
        head = f"{event.get('stopReason') or '-'}, {tokens(prompt)} in ({cached} cached), {out} out"
        return head + _said(str(event.get("text") or ""))
    if kind == "tool_call_started":
        return one_line(f"{event.get('toolName')} {event.get('inputSummary') or ''}".rstrip())
    if kind == "tool_call_completed":
        took = f" {event['durationMs']} ms" if isinstance(event.get("durationMs"), int) else ""
        result = one_line(str(event.get("resultSummary") or ""))
        return f"{event.get('toolName')}{took}" + (f": {result[:200]}" if result else "")
    if kind == "model_retry":
        status = event.get("status") or "no answer"
        why = f": {event['error']}" if event.get("error") else ""
        return f"{status}, call {event.get('attempt')} failed; next in {event.get('waitSeconds')}s{why}"
    if kind == "context_compacted":
        return (
            f"{tokens(event.get('beforeTokens'))} -> {tokens(event.get('afterTokens'))} tokens, "
            f"{event.get('turnsSummarized')} turn(s) summarised ({event.get('summary', 'model')})"
        )
    shown = (
        f"{key}={one_line(cell(value))}" for key, value in event.items() if key not in _EVENT_DETAIL_SKIP
    )
    return " ".join(shown)


def one_line(text: str) -> str:
    """A value on one line of `events`' layout: newlines and tabs (a directory listing's
    result, a command's output) shown as `\\n` and `\\t`, not breaking the columns (issue 45)."""
    return text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")


def event_line(event: dict[str, Any]) -> str:
    """`03:04:05 sess_…XYZW  turn 2  steer_delivered  offsets=[1, 2]` for one event (what the
    agent said follows an llm_turn_completed on lines of their own)."""
    ts = event.get("ts")
    clock = ts.partition("T")[2][:8] if isinstance(ts, str) else "--:--:--"
    session = str(event.get("sessionId") or "-")
    short = f"…{session[-6:]}" if session.startswith("sess_") else session
    turn = f"turn {event['turnId']}" if isinstance(event.get("turnId"), int) else ""
    return f"{clock} {short:>8} {turn:>8}  {event.get('kind', '?'):<20} {_details(event)}".rstrip()


def issue_line(issue: dict[str, Any]) -> str:
    ts = issue.get("ts")
    clock = short_time(ts) if isinstance(ts, str) else "-"
    where = f"{issue.get('sessionId', '-')} turn {issue.get('turnId', '-')}"
    head = f"{clock} [{issue.get('severity', '?')}] {issue.get('kind', '?')}"
    line = f"{head} {where}: {issue.get('summary', '')}"
    if issue.get("suggestedFix"):
        line += f" (fix: {issue['suggestedFix']})"
    return line
