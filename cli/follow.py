"""`worktrain issues` and `worktrain events`: one page, or `--follow` until Ctrl-C.

Following polls the paged routes (`GET /api/v2/issues?sessionId=&since=`,
`GET /api/v2/events?since=`) with the `next` cursor each page returns; `events --session ID
--follow` reads that session's Server-Sent Events instead, and ends by itself after its
`session_completed`. `events --session ID` without --follow reads the same stream, the
session's own (`GET /api/v2/events?sessionId=`), to its end (or one page with --limit): so
`--since` is an id of that stream with or without --follow.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import click

from cli.common import Call, client_command, session_id_arg
from cli.output import event_line, issue_line, print_json, print_json_line, say

Entry = dict[str, Any]
DEFAULT_PAGE = 100  # the server's page size when no limit is given
SESSION_PAGE = 1000  # the server's largest page (web.sessions.MAX_PAGE)


def page_of(reply: dict[str, Any], name: str) -> tuple[list[Entry], str | None]:
    """The entries and the `next` cursor of one page of the issues or events route."""
    data = reply.get("data", reply)
    if not isinstance(data, dict):
        return [], None
    entries = data.get(name)
    if not isinstance(entries, list):
        entries = data.get("entries", [])
    cursor = data.get("next")
    return [e for e in entries if isinstance(e, dict)], cursor if isinstance(cursor, str) and cursor else None


def follow_pages(
    call: Call,
    path: str,
    name: str,
    query: dict[str, Any],
    since: str | None,
    interval: float,
    render: Callable[[Entry], None],
) -> None:
    """Poll `path` forever from `since`, printing every new entry once, in order."""
    cursor = since
    while True:
        reply = call.client.get(path, **query, since=cursor)
        entries, next_cursor = page_of(reply, name)
        for entry in entries:
            render(entry)
        if next_cursor:
            cursor = next_cursor
        if not entries:
            time.sleep(interval)


def _printer(call: Call, line: Callable[[Entry], str]) -> Callable[[Entry], None]:
    if call.as_json:
        return print_json_line
    return lambda entry: say(line(entry))


def _one_page(call: Call, path: str, name: str, query: dict[str, Any], line: Callable[[Entry], str]) -> None:
    reply = call.client.get(path, **query)
    if call.as_json:
        print_json(reply)
        return
    entries, cursor = page_of(reply, name)
    for entry in entries:
        say(line(entry))
    if not entries:
        say(f"no {name}", err=True)
    elif cursor and len(entries) >= (query.get("limit") or DEFAULT_PAGE):
        say(f"(more: --since {cursor})", err=True)


since_option = click.option("--since", metavar="CURSOR", help="Start after this cursor (a `next` value).")
limit_option = click.option("--limit", type=click.IntRange(min=1), help="Entries per page.")
interval_option = click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between polls.",
)


@client_command("issues", short_help="Issues the agents reported (report_issue).", follows=True)
@click.option("--session", "session_id", callback=session_id_arg, metavar="ID", help="Only this session's.")
@since_option
@limit_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new issues until Ctrl-C.")
@interval_option
def issues(
    call: Call, session_id: str | None, since: str | None, limit: int | None, follow: bool, interval: float
) -> None:
    """Issues raised with report_issue, oldest first (stream wt:issues)."""
    query = {"sessionId": session_id, "limit": limit}
    if follow:
        follow_pages(call, "/api/v2/issues", "issues", query, since, interval, _printer(call, issue_line))
        return
    _one_page(call, "/api/v2/issues", "issues", {**query, "since": since}, issue_line)


@client_command("events", short_help="Session events: turns, tools, steers, outcomes.", follows=True)
@click.option(
    "--session",
    "session_id",
    callback=session_id_arg,
    metavar="ID",
    help="Only this session's; with --follow, stream them until it completes.",
)
@since_option
@limit_option
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events until Ctrl-C.")
@interval_option
def events(
    call: Call, session_id: str | None, since: str | None, limit: int | None, follow: bool, interval: float
) -> None:
    """Events of every session (stream wt:events), or of one with --session (its own stream), oldest first."""
    render = _printer(call, event_line)
    if session_id is not None and follow:
        stream = call.client.events_stream(f"/api/v2/sessions/{session_id}/events", last_event_id=since)
        for sse in stream:
            if isinstance(sse.data, dict) and "kind" in sse.data:
                render(sse.data)
                if sse.data["kind"] == "session_completed":
                    return
        return
    if follow:
        follow_pages(call, "/api/v2/events", "events", {"limit": limit}, since, interval, render)
        return
    if session_id is not None and limit is None:
        _session_events(call, session_id, since)
        return
    query = {"sessionId": session_id, "limit": limit, "since": since}
    _one_page(call, "/api/v2/events", "events", query, event_line)


def _session_events(call: Call, session_id: str, since: str | None) -> None:
    """One session's events so far: its own stream, read to its end, `SESSION_PAGE` at a time."""
    found: list[Entry] = []
    cursor = since
    while True:
        reply = call.client.get("/api/v2/events", sessionId=session_id, since=cursor, limit=SESSION_PAGE)
        entries, next_cursor = page_of(reply, "events")
        found.extend(entries)
        done = len(entries) < SESSION_PAGE or not next_cursor or next_cursor == cursor
        cursor = next_cursor or cursor
        if done:
            break
    if call.as_json:
        print_json({"success": True, "data": {"events": found, "next": cursor or ""}})
        return
    for entry in found:
        say(event_line(entry))
    if not found:
        say("no events", err=True)
