"""`worktrain triggers [ID] [--fires]` and `worktrain triggers --check FILE` (README's Triggers).

Without `--check`: a client of `GET /api/v2/triggers[/<id>]` — one line a trigger (mode,
events, last fire, last poll, sessions started, last error), or one trigger and, with
`--fires`, its newest fires (event, key, result, session). With `--check FILE`: the file
read and checked here, offline, as `web`, `worker` and `up` check it at start (its
workflows against WORKTRAIN_WORKFLOWS_DIR, its workspaces against the roots, and the
variables it names for secrets in this environment, never their values); every problem as
`file:line: field: what`, exit 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from cli.common import Call, client_command
from cli.output import print_json, say

TRIGGER_ID = r"^[a-z0-9-]{1,64}$"


def trigger_line(trigger: dict[str, Any]) -> str:
    state = trigger.get("state") or {}
    fired = f"{state.get('lastResult')} {state.get('lastFireAt')}" if state.get("lastFireAt") else "never"
    polled = ""
    if trigger.get("mode") == "poll":
        polled = (
            f"  polled {state.get('lastPollResult')} {state.get('lastPollAt')}"
            if state.get("lastPollAt")
            else "  never polled"
        )
    error = f"  last error: {state.get('lastError')}" if state.get("lastError") else ""
    return (
        f"{trigger.get('id')}  {trigger.get('source')}/{trigger.get('mode')}  "
        f"{','.join(trigger.get('events') or [])}  -> {trigger.get('workflowId')}  "
        f"fired {fired}{polled}  sessions {state.get('sessionsStarted', 0)}{error}"
    )


def fire_line(fire: dict[str, Any]) -> str:
    said = fire.get("reason") or fire.get("error") or ""
    offset = f" steer {fire['offset']}" if fire.get("offset") is not None else ""
    return (
        f"{fire.get('at')}  {fire.get('event')}  {fire.get('key') or '-'}  {fire.get('result')}  "
        f"{fire.get('sessionId') or '-'}{offset}  {said}".rstrip()
    )


def check_file(path: Path) -> int:
    """Read and check the file offline: 0 when it can be used, 1 (problems on stderr) when not."""
    from daemon.host import secrets
    from daemon.host.config import ConfigError, load_settings
    from daemon.triggers.loading import TriggerFileError, read_triggers
    from daemon.triggers.setup import check_triggers
    from daemon.workflows import load_catalog

    try:
        settings = load_settings()
        triggers = read_triggers(path, required=True)
        check_triggers(
            triggers, "check", load_catalog(settings.workflows_dir).workflows, settings, secrets.value
        )
    except ConfigError as exc:
        say(str(exc), err=True)
        return 2
    except TriggerFileError as exc:
        for line in exc.lines():
            say(line, err=True)
        return 1
    say(f"{path}: {len(triggers)} trigger(s), no problem found")
    return 0


@client_command("triggers", short_help="List the triggers and what they did (README's Triggers).")
@click.argument("trigger_id", required=False)
@click.option("--fires", is_flag=True, help="With ID: its newest fires (event, key, result, session).")
@click.option(
    "--limit", type=click.IntRange(min=1, max=1000), default=50, show_default=True, help="Fires shown."
)
@click.option(
    "--check",
    "check",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Check this triggers file offline, as `web`, `worker` and `up` do at start (exit 1 on a problem).",
)
def triggers(call: Call, trigger_id: str | None, fires: bool, limit: int, check: Path | None) -> None:
    """Each trigger of the triggers file with its state; one trigger (and its fires); or --check FILE."""
    if check is not None:
        raise SystemExit(check_file(check))
    if trigger_id is None:
        data = call.client.get("/api/v2/triggers").get("data", {})
        if call.as_json:
            print_json(data)
            return
        for trigger in data.get("triggers", []):
            say(trigger_line(trigger))
        if not data.get("triggers"):
            say("no triggers (WORKTRAIN_TRIGGERS_FILE, or <data dir>/triggers.yml)", err=True)
        return
    import re

    if not re.fullmatch(TRIGGER_ID, trigger_id):
        raise click.BadParameter(f"{trigger_id[:80]!r} is not a trigger id ([a-z0-9-], 1-64)")
    data = call.client.get(f"/api/v2/triggers/{trigger_id}", limit=limit).get("data", {})
    if call.as_json:
        print_json(data)
        return
    say(trigger_line(data))
    state = data.get("state") or {}
    if state.get("cursor"):
        poller = state.get("poller") or "-"
        say(f"  cursor {state['cursor']}  next poll in {next_poll(state)}  poller {poller}")
    if state.get("queued"):
        say(f"  {state['queued']} event(s) queued behind live sessions")
    if fires:
        for fire in data.get("fires", []):
            say("  " + fire_line(fire))


def next_poll(state: dict[str, Any]) -> str:
    import time

    due = state.get("nextPollMs")
    if not due:
        return "-"
    return f"{max(0.0, due / 1000 - time.time()):.0f} s"
