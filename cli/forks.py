"""`worktrain fork` (README's "Fork a session"): a thin client of `POST /api/v2/sessions/<id>/fork`."""

from __future__ import annotations

import sys
import uuid
from typing import Any

import click

from cli.common import Call, client_command, session_id_arg
from cli.output import info_line, print_json, say


@client_command("fork", short_help="Fork a session from one of its turns.")
@click.argument("session_id", callback=session_id_arg)
@click.option(
    "--turn", "-t", type=click.IntRange(min=1), required=True, metavar="N", help="Carry on after turn N."
)
@click.option(
    "-m",
    "--message",
    "message",
    metavar="TEXT",
    help="A steer: what the fork's next turn reads first (`-` reads it from stdin).",
)
@click.option("--model", metavar="MODEL", help="Run the fork on another model [default: the source's].")
@click.option("--goal", metavar="TEXT", help="Give the fork another goal [default: the source's].")
@click.option(
    "--idempotency-key",
    "idempotency_key",
    metavar="KEY",
    help="1-128 of [A-Za-z0-9._:-]: a retry with the same key answers the first fork [default: generated].",
)
def fork(
    call: Call,
    session_id: str,
    turn: int,
    message: str | None,
    model: str | None,
    goal: str | None,
    idempotency_key: str | None,
) -> None:
    """Fork SESSION_ID from turn N: a new session with its history through turn N (the model is
    not asked again for those turns), its workflow step after N and, for a worktree session,
    its worktree as it was at the end of N, on a branch of its own. Prints the fork's id.

    The source, running or ended, is not changed."""
    body: dict[str, Any] = {"turn": turn}
    if message is not None:
        body["steer"] = sys.stdin.read() if message == "-" else message
    if model is not None:
        body["agentConfig"] = {"model": model}
    if goal is not None:
        body["goal"] = goal
    key = idempotency_key or f"cli-fork-{uuid.uuid4().hex}"
    reply = call.client.post(f"/api/v2/sessions/{session_id}/fork", body, headers={"Idempotency-Key": key})
    if call.as_json:
        print_json(reply)
        return
    data = reply.get("data") or {}
    fork_id = data.get("sessionId", "?")
    say(fork_id)
    where = (
        "its conversation only (the same workspace)" if data.get("conversationOnly") else "its worktree too"
    )
    info_line(
        f"{data.get('status', 'queued')}: a fork of {session_id} after turn {turn}, {where}\n"
        f"  steer it:  worktrain steer {fork_id} 'your text'\n"
        f"  watch it:  worktrain events --session {fork_id} --follow"
    )
