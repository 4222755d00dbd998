"""Coordinator commands: thin clients of the HTTP API (README's HTTP API, README's worktrain command).

`dispatch`, `steer`, `sessions`, `session`, `cancel`, `workflows`; `issues` and `events`
live in cli/follow.py, `steers`, `retract` and `edit` in cli/steerjournal.py. Each prints a
line or a table for people and, with `--json`, the server's JSON body as it came.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from cli.agentconfig import agent_body, agent_options
from cli.client import steer_body
from cli.common import Call, client_command, session_id_arg
from cli.output import info_line, print_fields, print_json, print_table, say, short_time, tokens
from cli.sessionview import summary_rows
from cli.signals import print_tree
from cli.steerjournal import all_steers, print_steers, settle
from cli.workspace import WorkersView, check_repository, resolve_workspace
from cli.workspaces import workspace_body, workspace_options

STATUSES = ("queued", "running", "waiting", "completed", "failed", "cancelled")


def _data(body: dict[str, Any]) -> dict[str, Any]:
    data = body.get("data", body)
    return data if isinstance(data, dict) else {}


def _context(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    if raw.startswith("@"):
        try:
            with open(raw[1:], encoding="utf-8") as handle:
                raw = handle.read()
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {raw[1:]}: {exc.strerror}", param_hint="--context"
            ) from exc
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--context") from exc
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--context")
    return value


@client_command("dispatch", short_help="Start a session of a workflow.")
@click.argument("workflow_id")
@click.argument("goal")
@click.option(
    "--workspace",
    "-w",
    default=None,
    metavar="DIR",
    help="The folder the agent works in, on the worker's host (made absolute here; required, "
    "or --here). With the API on this host, it must exist here.",
)
@click.option("--here", is_flag=True, help="Work in the current directory (instead of --workspace).")
@click.option("--context", "context", metavar="JSON|@FILE", help="A JSON object handed to the workflow.")
@click.option(
    "--gates",
    type=click.Choice(("skip", "steer")),
    help="steer: a step that requires confirmation waits for a steer [server default: skip].",
)
@click.option(
    "--callback-url",
    "callback_url",
    metavar="URL",
    help="An http(s) URL POSTed this session's webhooks (session.finished, session.question, ...); "
    "its children inherit it.",
)
@workspace_options
@agent_options
def dispatch(
    call: Call,
    workflow_id: str,
    goal: str,
    workspace: str | None,
    here: bool,
    context: str | None,
    gates: str | None,
    callback_url: str | None,
    **placement: Any,
) -> None:
    """Start a session of WORKFLOW_ID with GOAL; print its session id.

    The id goes to stdout alone (SID=$(worktrain dispatch ...)); the hint to stderr. The
    session is steerable from the moment this returns.
    """
    workers = WorkersView(call.client)
    body: dict[str, Any] = {
        "workflowId": workflow_id,
        "goal": goal,
        "workspacePath": resolve_workspace(workspace, here, workers),
    }
    check_repository(body["workspacePath"], placement.get("branch_strategy"), workers)
    parsed = _context(context)
    if parsed is not None:
        body["context"] = parsed
    if gates is not None:
        body["gates"] = gates
    if callback_url is not None:
        body["callbackUrl"] = callback_url
    body.update(workspace_body(placement))
    body.update(agent_body(placement))
    reply = call.client.post("/api/v2/auto/dispatch", body)
    if call.as_json:
        print_json(reply)
        return
    data = _data(reply)
    session_id = data.get("sessionId", "?")
    say(session_id)
    status = data.get("status", "queued")
    info_line(
        f"{status}: workflow {data.get('workflowId', workflow_id)} in {body['workspacePath']}\n"
        f"  steer it:  worktrain steer {session_id} 'your text'\n"
        f"  watch it:  worktrain events --session {session_id} --follow"
    )
    for warning in data.get("warnings") or []:  # e.g. a model the price table does not know
        info_line(f"worktrain: warning: {warning.get('message') or warning.get('code')}")


@client_command("steer", short_help="Send a steer to a running session.", waits=True)
@click.argument("session_id", callback=session_id_arg)
@click.argument("text")
@click.option(
    "--expected-turn",
    type=click.IntRange(min=0),
    metavar="N",
    help="Accept only while turn N is live (else exit 6: stale_turn / no_live_turn).",
)
@click.option(
    "--client-msg-id",
    metavar="ID",
    help="Idempotency key (1-128 of [A-Za-z0-9._:-]): a retry with the same text is a duplicate.",
)
@click.option(
    "--mode",
    type=click.Choice(("queue", "interrupt")),
    default="queue",
    show_default=True,
    help="interrupt: cut the live turn short (the model call in flight is abandoned, a running "
    "command stopped) and deliver at once.",
)
@click.option(
    "--wait",
    "wait",
    is_flag=True,
    help="Wait for the receipt: print it when delivered (exit 0); exit 10 if retracted or "
    "undelivered, 11 if still pending after --wait-timeout.",
)
@click.option(
    "--wait-timeout",
    type=click.FloatRange(min=0),
    default=600.0,
    show_default=True,
    metavar="SECONDS",
    help="How long --wait waits.",
)
def steer(
    call: Call,
    session_id: str,
    text: str,
    expected_turn: int | None,
    client_msg_id: str | None,
    mode: str,
    wait: bool,
    wait_timeout: float,
) -> None:
    """Steer SESSION_ID with TEXT (`-` reads it from stdin).

    The text reaches the agent at its next turn end (with --mode interrupt: at once),
    exactly once, in order; --wait prints the receipt (the turn that received it).
    """
    if text == "-":
        text = sys.stdin.read()
    reply = call.client.post(
        f"/api/v2/sessions/{session_id}/steer", steer_body(text, expected_turn, client_msg_id, mode)
    )
    ref = reply.get("steer") or {}
    if not call.as_json:
        turn = ref.get("turnId", 0)
        when = f"live turn {turn}" if turn else "no live turn: it reaches the next one"
        if reply.get("status") == "duplicate":
            say(f"duplicate: already accepted as offset {ref.get('offset')} ({when})")
        else:
            say(f"accepted: offset {ref.get('offset')} ({when})")
    if not wait:
        if call.as_json:
            print_json(reply)
        return
    receipt = call.client.wait_for_steer(session_id, int(ref["offset"]), wait_timeout)
    if call.as_json:
        print_json({**reply, "receipt": receipt})
    settle(call, receipt, quiet=call.as_json)


@client_command("sessions", short_help="List sessions, newest first.")
@click.option("--status", type=click.Choice(STATUSES), help="Only sessions in this status.")
@click.option("--limit", type=click.IntRange(min=1), help="At most this many.")
@click.option("--parent", callback=session_id_arg, help="Only the sub-agents this session spawned.")
def sessions(call: Call, status: str | None, limit: int | None, parent: str | None = None) -> None:
    """List sessions, newest first."""
    reply = call.client.get("/api/v2/sessions", status=status, limit=limit, parent=parent)
    if call.as_json:
        print_json(reply)
        return
    data = _data(reply)
    rows = [
        (
            s.get("sessionId"),
            s.get("workflowId"),
            s.get("status") + (f" ({s['waitingFor']})" if s.get("waitingFor") else ""),
            s.get("turnId") or "-",
            s.get("turnCount"),
            f"{s.get('stepIndex', 0)}/{s.get('stepCount', 0)}",
            s.get("pendingSteers"),
            usage_cell(s),
            short_time(s.get("createdAt")),
            s.get("outcome"),
        )
        for s in data.get("sessions", [])
    ]
    title = f"{data.get('totalCount', len(rows))} session(s)"
    columns = (
        "session", "workflow", "status", "live turn", "turns", "step", "pending", "tokens in/out", "created",
        "outcome",
    )  # fmt: skip
    print_table(columns, rows, title=title, empty="no sessions")


def usage_cell(record: dict[str, Any]) -> str:
    """`1.2M/35.0k`: prompt tokens (input + cache read + cache write) and output tokens."""
    prompt = sum(int(record.get(k) or 0) for k in ("inputTokens", "cacheReadTokens", "cacheWriteTokens"))
    return f"{tokens(prompt)}/{tokens(int(record.get('outputTokens') or 0))}"


@client_command("session", short_help="Show one session (and its steers).")
@click.argument("session_id", callback=session_id_arg)
@click.option(
    "--steers", "with_steers", is_flag=True, help="Also show the steer journal with delivery state."
)
@click.option("--tree", "as_tree", is_flag=True, help="Show the session and every sub-agent below it.")
def session(call: Call, session_id: str, with_steers: bool, as_tree: bool = False) -> None:
    """Show SESSION_ID: status, step, live turn, goal, tokens, delivery, outcome — a readable
    summary; --json prints the whole record as the API answers it."""
    if as_tree and not call.as_json:
        print_tree(call, session_id)
        return
    reply = call.client.get(f"/api/v2/sessions/{session_id}")
    steers = all_steers(call, session_id) if with_steers else None
    if call.as_json:
        listed = {"success": True, "data": {"sessionId": session_id, "steers": steers}}
        print_json(reply if steers is None else {**reply, "steers": listed})
        return
    print_fields(summary_rows(_data(reply)), title=session_id)
    if steers is not None:
        print_steers(steers)


@client_command("cancel", short_help="Cancel a session.")
@click.argument("session_id", callback=session_id_arg)
def cancel(call: Call, session_id: str) -> None:
    """Cancel SESSION_ID: a queued session ends now, a running one within seconds (its live
    turn is cut short)."""
    reply = call.client.post(f"/api/v2/sessions/{session_id}/cancel", {})
    if call.as_json:
        print_json(reply)
        return
    status = _data(reply).get("status")
    say(f"cancel requested: {session_id}" + (f" ({status})" if status else ""))


@client_command("workflows", short_help="List the workflows a session can run.")
def workflows(call: Call) -> None:
    """List the workflow catalog (bundled, plus WORKTRAIN_WORKFLOWS_DIR), then the files
    that were skipped and why."""
    reply = call.client.get("/api/v2/workflows")
    if call.as_json:
        print_json(reply)
        return
    data = _data(reply)
    rows = [
        (
            w.get("id"),
            w.get("name"),
            w.get("stepCount", len(w.get("steps", []))),
            ", ".join(f"{x.get('type')} (max {x.get('maxIterations')})" for x in w.get("loops", [])) or "-",
            w.get("description"),
        )
        for w in data.get("workflows", [])
    ]
    print_table(("id", "name", "steps", "loops", "description"), rows, empty="no workflows")
    problems = data.get("problems") or {}
    skipped = [(s.get("file"), s.get("reason")) for s in data.get("skipped", [])] or list(problems.items())
    if skipped:
        print_table(("file", "why it was skipped"), skipped, title=f"{len(skipped)} file(s) skipped")
