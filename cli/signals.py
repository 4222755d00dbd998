"""`worktrain signals`, `worktrain reply` and the session tree (README's Sub-agents and questions).

`signals ID` prints the session's coordinator signals; `--follow` long-polls
`GET /api/v2/sessions/<id>/signals?wait=` (each request is answered the moment a signal
lands) until Ctrl-C or the session ends. Without an id it pages every session's signals
(`GET /api/v2/signals`), and `--follow` reads on. `reply ID TEXT` answers a question: it is
a steer, which a session waiting with `waitingFor: reply` receives as the question's result.
`session ID --tree` (cli/coordinator.py) prints the session and its descendants.
"""

from __future__ import annotations

import time
from typing import Any

import click

from cli.client import steer_body
from cli.common import Call, client_command, session_id_arg
from cli.output import info_line, print_json, say

FOLLOW_WAIT_SECONDS = 25
FINISHED = ("completed", "failed", "cancelled")


def signal_line(signal: dict[str, Any]) -> str:
    waits = " (waits for a reply)" if signal.get("wait") else ""
    who = signal.get("sessionId", "")
    head = f"{signal.get('ts', '')}  {who}  #{signal.get('offset')} turn {signal.get('turnId')}"
    return f"{head}  {signal.get('kind')}: {signal.get('summary')}{waits}"


def _show(call: Call, signals: list[dict[str, Any]]) -> None:
    for signal in signals:
        if call.as_json:
            print_json(signal)
        else:
            say(signal_line(signal))


@client_command(
    "signals", short_help="Show (or follow) the signals agents send their coordinator.", follows=True
)
@click.argument("session_id", required=False, callback=session_id_arg)
@click.option("--since", help="After this offset (with an ID) or stream id (without).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new signals until Ctrl-C.")
def signals(call: Call, session_id: str | None, since: str | None, follow: bool) -> None:
    """Show SESSION_ID's signals (progress, findings, questions, results); without an id,
    every session's."""
    if session_id is None:
        _global(call, since or "", follow)
        return
    cursor = int(since or 0)
    first = True
    ended = _ended(call, session_id) if follow else None
    wait = FOLLOW_WAIT_SECONDS if follow and ended is None else None
    while True:
        query: dict[str, Any] = {"since": cursor}
        if wait is not None:
            query["wait"] = wait
        reply = call.client.get(
            f"/api/v2/sessions/{session_id}/signals", timeout=FOLLOW_WAIT_SECONDS + 10, **query
        )
        data = reply.get("data", {})
        _show(call, data.get("signals", []))
        if first and not data.get("signals") and ended is None:  # an ended session says so below
            after = f" after {cursor}" if cursor else ""
            none_yet(call, f"{session_id} has sent no signal{after}", follow)
        first = False
        cursor = int(data.get("next", cursor))
        if not follow:
            return
        if ended is None and not data.get("signals"):
            ended = _ended(call, session_id)
        if ended is not None and not data.get("signals"):
            info_line(f"{session_id} has ended ({ended}): no more signals will come")
            return


def _ended(call: Call, session_id: str) -> str | None:
    """`status, outcome X` once the session has ended (worded as `steer` words it), else None."""
    data = call.client.get(f"/api/v2/sessions/{session_id}").get("data", {})
    status, outcome = data.get("status"), data.get("outcome")
    if status not in FINISHED:
        return None
    return f"{status}, outcome {outcome}" if outcome else str(status)


def none_yet(call: Call, what: str, follow: bool) -> None:
    """Say that there is no signal (on stderr: stdout stays the signals), rather than nothing."""
    if not call.as_json:
        info_line(f"{what} yet" + ("; waiting for one (Ctrl-C stops)" if follow else ""))


def _global(call: Call, since: str, follow: bool, interval: float = 1.0) -> None:
    first = True
    while True:
        reply = call.client.get("/api/v2/signals", since=since)
        data = reply.get("data", {})
        _show(call, data.get("signals", []))
        if first and not data.get("signals"):
            none_yet(call, "no session has sent a signal" + (" after that" if since else ""), follow)
        first = False
        since = str(data.get("next", since))
        if not follow:
            return
        if not data.get("signals"):
            time.sleep(interval)


@client_command("reply", short_help="Answer a session's question (a steer).")
@click.argument("session_id", callback=session_id_arg)
@click.argument("text")
def reply(call: Call, session_id: str, text: str) -> None:
    """Send TEXT to SESSION_ID: the answer a question (`waitingFor: reply`) waits for, or
    an ordinary steer when nothing waits."""
    answer = call.client.post(f"/api/v2/sessions/{session_id}/steer", steer_body(text, None, None, "queue"))
    if call.as_json:
        print_json(answer)
        return
    steer = answer.get("steer", {})
    say(f"replied: {session_id} offset {steer.get('offset')} ({answer.get('status')})")


def print_tree(call: Call, session_id: str) -> None:
    """The session and every session below it, one line each, indented by depth."""
    lines: list[str] = []

    def walk(sid: str, indent: int) -> None:
        data = call.client.get(f"/api/v2/sessions/{sid}").get("data", {})
        outcome = f" {data.get('outcome')}" if data.get("outcome") else ""
        waiting = f" (waiting for {data.get('waitingFor')})" if data.get("waitingFor") else ""
        lines.append(
            f"{'  ' * indent}{sid}  {data.get('workflowId')}  {data.get('status')}{outcome}{waiting}"
        )
        for child in data.get("children", []):
            walk(child["sessionId"], indent + 1)

    walk(session_id, 0)
    for line in lines:
        say(line)
