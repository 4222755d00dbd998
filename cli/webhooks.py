"""`worktrain webhooks [--failed] [--session ID]` (README's Webhooks): what was POSTed where.

A table with a header row, a delivery a row, newest first: when it was queued, its id, the
event, the session, the receiver, its state (pending / delivered / failed), tries so far and
the last answer (`GET /api/v2/webhooks`, or `GET /api/v2/sessions/<id>/webhooks` with
`--session`).
"""

from __future__ import annotations

from typing import Any

import click

from cli.common import Call, client_command, session_id_arg
from cli.output import info_line, print_json, print_table, short_time

COLUMNS = ("queued", "id", "event", "session", "receiver", "state", "tries", "last answer")


def delivery_row(delivery: dict[str, Any]) -> tuple[Any, ...]:
    last = delivery.get("lastStatus") or delivery.get("lastError") or "-"
    return (
        short_time(delivery.get("createdAt")),
        delivery.get("id"),
        delivery.get("type"),
        delivery.get("sessionId"),
        delivery.get("url"),
        delivery.get("state"),
        delivery.get("attempts", 0),
        last,
    )


@client_command("webhooks", short_help="List webhook deliveries (README's Webhooks).")
@click.option("--failed", is_flag=True, help="Only the deliveries given up after 24 h of retries.")
@click.option("--session", "session_id", callback=session_id_arg, help="Only this session's deliveries.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many.")
def webhooks(call: Call, failed: bool, session_id: str | None, limit: int) -> None:
    """List the newest webhook deliveries: pending, delivered, failed."""
    if session_id is not None:
        data = call.client.get(f"/api/v2/sessions/{session_id}/webhooks").get("data", {})
        deliveries = [d for d in data.get("deliveries", []) if not failed or d.get("state") == "failed"]
    else:
        query: dict[str, Any] = {"limit": limit}
        if failed:
            query["failed"] = "true"
        data = call.client.get("/api/v2/webhooks", **query).get("data", {})
        deliveries = data.get("deliveries", [])
    if call.as_json:
        print_json(data if session_id is None else {"sessionId": session_id, "deliveries": deliveries})
        return
    print_table(COLUMNS, [delivery_row(d) for d in deliveries], empty="no webhook deliveries")
    if session_id is None:
        info_line(f"{data.get('pending', 0)} pending fleet-wide")
