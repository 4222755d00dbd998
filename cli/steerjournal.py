"""`worktrain steers`, `retract`, `edit`: a session's steers and their receipts (README's Managing steers).

`steers ID` prints the journal folded into one row per steer (paged through `?since=`);
`--follow` then reads the session's Server-Sent Events (from its start, so nothing between
the listing and the stream is missed) and prints a steer again each time an event changed
it (accepted, edited, retracted, delivered, undelivered) — only when it did, so a replayed
event prints nothing — until the session completes. `retract` and `edit` change a pending
steer; once a turn end has taken it they exit 6 (409 `steer_taken`). `settle` is
`steer --wait`'s ending.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from cli.client import ExitCode
from cli.common import Call, client_command, session_id_arg
from cli.output import print_json, print_json_line, print_table, say, short_time

PAGE = 1000  # the server's largest page
STEER_KINDS = frozenset(
    {"steer_accepted", "steer_edited", "steer_retracted", "steer_delivered", "steer_undelivered"}
)


def all_steers(call: Call, session_id: str) -> list[dict[str, Any]]:
    """Every steer of the session, in offset order (all pages)."""
    steers: list[dict[str, Any]] = []
    since = 0
    while True:
        data = call.client.get(f"/api/v2/sessions/{session_id}/steers", since=since or None, limit=PAGE)[
            "data"
        ]
        page = [s for s in data.get("steers", []) if isinstance(s, dict)]
        steers.extend(page)
        if len(page) < PAGE:
            return steers
        since = int(data.get("next") or page[-1]["offset"])


def print_steers(steers: list[dict[str, Any]]) -> None:
    rows = [
        (
            s.get("offset"),
            state_of(s),
            s.get("turnId"),
            s.get("deliveredTurnId"),
            s.get("clientMsgId"),
            short_time(s.get("acceptedAt")),
            s.get("text"),
        )
        for s in steers
    ]
    columns = ("offset", "state", "sent at turn", "delivered to turn", "clientMsgId", "accepted", "text")
    print_table(columns, rows, title="steers", empty="no steers")


def state_of(steer: dict[str, Any]) -> str:
    """`pending`, `delivered`, ... with what else is worth a glance: interrupt, edits."""
    marks = [str(steer.get("state"))]
    if steer.get("mode") == "interrupt":
        marks.append("interrupt")
    if steer.get("edits"):
        marks.append(f"edited x{steer['edits']}")
    return ", ".join(marks)


def steer_line(steer: dict[str, Any]) -> str:
    """`#3 delivered to turn 5: text` (one steer, for --follow and receipts)."""
    where = f" to turn {steer['deliveredTurnId']}" if steer.get("deliveredTurnId") else ""
    return f"#{steer.get('offset')} {state_of(steer)}{where}: {steer.get('text')}"


def settle(call: Call, receipt: dict[str, Any], quiet: bool = False) -> None:
    """`steer --wait`'s end: the receipt line; exit 10 unless delivered, 11 if still pending."""
    state = receipt.get("state")
    if not quiet:
        say(
            f"{state}: offset {receipt.get('offset')}"
            + (f" in turn {receipt['deliveredTurnId']}" if state == "delivered" else "")
        )
    if state == "pending":
        raise SystemExit(int(ExitCode.STILL_PENDING))
    if state != "delivered":
        raise SystemExit(int(ExitCode.NOT_DELIVERED))


@client_command("steers", short_help="A session's steers and their receipts.", follows=True)
@click.argument("session_id", callback=session_id_arg)
@click.option(
    "--follow", "-f", is_flag=True, help="Then print each steer again as it changes, until the session ends."
)
def steers(call: Call, session_id: str, follow: bool) -> None:
    """The steers of SESSION_ID, oldest first: state (pending, delivered, undelivered,
    retracted), the turn that received each, its text (after any edit)."""
    listed = all_steers(call, session_id)
    if not follow:
        if call.as_json:
            print_json({"success": True, "data": {"sessionId": session_id, "steers": listed}})
        else:
            print_steers(listed)
        return
    shown: dict[int, dict[str, Any]] = {}

    def show(steer: dict[str, Any]) -> None:
        if shown.get(steer["offset"]) == steer:
            return
        shown[steer["offset"]] = steer
        print_json_line(steer) if call.as_json else say(steer_line(steer))

    for steer in listed:
        show(steer)
    for sse in call.client.events_stream(f"/api/v2/sessions/{session_id}/events"):
        event = sse.data if isinstance(sse.data, dict) else {}
        if event.get("kind") in STEER_KINDS:
            for offset in event.get("offsets") or [event.get("offset")]:
                show(call.client.get(f"/api/v2/sessions/{session_id}/steers/{int(offset)}")["data"])
        if event.get("kind") == "session_completed":
            return


@client_command("retract", short_help="Withdraw a steer before the agent sees it.")
@click.argument("session_id", callback=session_id_arg)
@click.argument("offset", type=click.IntRange(min=1))
def retract(call: Call, session_id: str, offset: int) -> None:
    """Retract the pending steer OFFSET of SESSION_ID: no model call will see it. Exit 6
    (steer_taken) when a turn end already took it."""
    reply = call.client.delete(f"/api/v2/sessions/{session_id}/steers/{offset}")
    if call.as_json:
        print_json(reply)
        return
    say(f"retracted: offset {offset}")


@client_command("edit", short_help="Rewrite a steer before the agent sees it.")
@click.argument("session_id", callback=session_id_arg)
@click.argument("offset", type=click.IntRange(min=1))
@click.argument("text")
def edit(call: Call, session_id: str, offset: int, text: str) -> None:
    """Replace the text of the pending steer OFFSET of SESSION_ID with TEXT (`-` reads it
    from stdin), keeping its place. Exit 6 (steer_taken) when a turn end already took it."""
    if text == "-":
        text = sys.stdin.read()
    reply = call.client.patch(f"/api/v2/sessions/{session_id}/steers/{offset}", {"text": text})
    if call.as_json:
        print_json(reply)
        return
    say(f"edited: offset {offset}")
