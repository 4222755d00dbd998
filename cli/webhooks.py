"""`worktrain webhooks [--failed] [--session ID]` (README's Webhooks): what was POSTed where.

One line a delivery, newest first: when it was queued, its id, the event, the session, the
receiver, its state (pending / delivered / failed), tries so far and the last answer
(`GET /api/v2/webhooks`, or `GET /api/v2/sessions/<id>/webhooks` with `--session`).
"""

from __future__ import annotations

from typing import Any

import click

from cli.common import Call, client_command, session_id_arg
from cli.output import print_json


def delivery_line(delivery: dict[str, Any]) -> str:
    last = delivery.get("lastStatus") or delivery.get("lastError") or "-"
    return (
        f"{delivery.get('createdAt', '')}  {delivery.get('id')}  {delivery.get('type')}  "
        f"{delivery.get('sessionId')}  {delivery.get('url')}  {delivery.get('state')}  "
        f"tries {delivery.get('attempts', 0)}  last {last}"
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
    for delivery in deliveries:
        click.echo(delivery_line(delivery))
    if session_id is None:
        click.echo(f"{data.get('pending', 0)} pending fleet-wide", err=True)
