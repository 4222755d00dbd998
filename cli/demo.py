"""`worktrain demo`: the first minute with WorkTrain, in one command.

It brings up a private stack (embedded Redis, web, one worker) in a temporary folder, so it
works beside a running `worktrain up` and leaves nothing behind; copies a tiny sample repo
into a workspace; dispatches a bundled workflow on it; steers the session once while a turn
is live; prints its events as they happen until it completes; and sums up. Without
ANTHROPIC_API_KEY the agent talks to the bundled fake model (`python -m daemon.fakemodel`,
`demo` rule); with it, to the Anthropic API.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from cli.output import say

SAMPLE_REPO = {
    "README.md": "# greeter\n\nA tiny sample project for the WorkTrain demo.\n\n"
    "Run `python greet.py NAME` to be greeted.\n",
    "greet.py": 'import sys\n\n\ndef greet(name: str) -> str:\n    return f"Hello, {name}!"\n\n\n'
    'if __name__ == "__main__":\n    print(greet(sys.argv[1] if len(sys.argv) > 1 else "world"))\n',
    "test_greet.py": "from greet import greet\n\n\n"
    'def test_greet():\n    assert greet("Ada") == "Hello, Ada!"\n',
}
STEER_TEXT = "Coordinator here: please also mention in your notes which files you looked at."
PREFERRED_WORKFLOWS = ("explore-and-document",)


class DemoTimeout(Exception):
    pass


def write_sample_repo(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in SAMPLE_REPO.items():
        (folder / name).write_text(content)
    return folder


def pick_workflow(catalog: dict[str, Any], wanted: str | None) -> str:
    ids = [str(w.get("id")) for w in catalog.get("data", {}).get("workflows", [])]
    if wanted is not None:
        if wanted not in ids:
            raise click.UsageError(f"no workflow {wanted!r}; bundled: {', '.join(ids) or 'none'}")
        return wanted
    for candidate in PREFERRED_WORKFLOWS:
        if candidate in ids:
            return candidate
    if not ids:
        raise click.ClickException("the catalog has no workflow")
    return ids[0]


def describe(event: dict[str, Any]) -> str | None:
    """One line for the events a newcomer should see; None for the others."""
    kind = event.get("kind")
    turn = event.get("turnId")
    lines = {
        "session_started": f"session started on worker {event.get('worker')}",
        "turn_started": f"turn {turn} started (the model is thinking)",
        "llm_turn_completed": f"turn {turn}: the model answered ({event.get('stopReason')}, "
        f"{event.get('inputTokens')} in / {event.get('outputTokens')} out tokens, "
        f"{event.get('cacheReadTokens')} from cache)",
        "tool_call_completed": f"turn {turn}: tool {event.get('toolName')} ok",
        "tool_call_failed": f"turn {turn}: tool {event.get('toolName')} failed: {event.get('error')}",
        "step_advanced": f"turn {turn}: step {event.get('fromStepId')} -> {event.get('toStepId') or 'done'}",
        "steer_accepted": f"steer accepted: offset {event.get('offset')} (live turn {turn})",
        "steer_delivered": f"steer delivered into turn {turn}: offsets {event.get('offsets')} (the receipt)",
        "steer_undelivered": f"steer NOT delivered: offsets {event.get('offsets')}",
        "issue_reported": f"turn {turn}: issue [{event.get('severity')}] {event.get('summary')}",
        "session_completed": f"session {event.get('status')}: {event.get('outcome')}",
    }
    return lines.get(str(kind))


def _alarm(seconds: float) -> None:
    def on_alarm(signum: int, frame: object) -> None:
        raise DemoTimeout

    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)


def _on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@click.command("demo")
@click.option("--workflow", metavar="ID", help="Workflow to run [default: the bundled demo workflow].")
@click.option(
    "--timeout", type=click.FloatRange(min=5), default=90.0, show_default=True, help="Give up after."
)
@click.option("--keep", is_flag=True, help="Keep the temporary folder (data, logs, workspace) afterwards.")
def demo_command(workflow: str | None, timeout: float, keep: bool) -> None:
    """See a session start, take a steer and finish, in well under a minute.

    Starts a private stack in a temporary folder (Redis, web, one worker), runs a bundled
    workflow on a copy of a tiny sample repo, steers it once, prints its events, and stops
    everything. Without ANTHROPIC_API_KEY the agent is the bundled fake model.
    """
    from daemon.host.secrets import seal

    held = seal("up")  # first: secrets leave the environment (this process re-executes itself)
    signal.signal(signal.SIGTERM, _on_sigterm)
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="worktrain-demo-"))
    started = time.monotonic()
    keep_folder = keep
    try:
        _alarm(timeout)
        run_demo(root, workflow, started, held)
    except DemoTimeout:
        keep_folder = True
        raise click.ClickException(
            f"the demo did not finish within {timeout:.0f}s (logs: {root / 'data' / 'logs'})"
        ) from None
    except KeyboardInterrupt:
        say("\ninterrupted.", err=True)
    except BaseException:
        keep_folder = True
        raise
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        if keep_folder:
            say(f"kept: {root}", err=True)
        else:
            shutil.rmtree(root, ignore_errors=True)


def run_demo(root: Path, workflow: str | None, started: float, held: Mapping[str, str]) -> None:
    from cli.supervisor import StackOptions, Supervisor
    from daemon.host.embedded_redis import free_port
    from daemon.host.secrets import API_KEY

    fake = API_KEY not in held
    say(
        "WorkTrain demo: "
        + (
            "no ANTHROPIC_API_KEY, so the agent talks to the bundled fake model."
            if fake
            else "using the Anthropic API."
        )
    )
    options = StackOptions(
        data_dir=root / "data",
        port=free_port(),
        workers=1,
        redis_port=free_port(),
        fake_model=fake,
        fake_latency=1.0,
        secrets=held,
    )
    supervisor = Supervisor(options, say=lambda text: say(text, err=True))
    supervisor.adopt_orphans()
    try:
        say(f"Starting Redis, the web tier and a worker in {root} ...")
        supervisor.start()
        say(f"  ready in {time.monotonic() - started:.1f}s: API {supervisor.api_url}")
        workspace = write_sample_repo(root / "workspace")
        tour(supervisor.api_url, supervisor.api_token, workspace, workflow, started)
    finally:
        supervisor.shutdown()


def tour(api_url: str, token: str | None, workspace: Path, workflow: str | None, started: float) -> None:
    from cli.client import Client

    client = Client(api_url, token)
    workflow_id = pick_workflow(client.get("/api/v2/workflows"), workflow)
    reply = client.post(
        "/api/v2/auto/dispatch",
        {"workflowId": workflow_id, "goal": "Get to know this little repo.", "workspacePath": str(workspace)},
    )
    session_id = reply["data"]["sessionId"]
    say(f"Dispatched workflow {workflow_id!r} on {workspace}\n  session {session_id}")
    steered = False
    outcome: dict[str, Any] = {}
    for sse in client.events_stream(f"/api/v2/sessions/{session_id}/events"):
        event = sse.data if isinstance(sse.data, dict) else {}
        line = describe(event)
        if line:
            say(f"  {time.monotonic() - started:5.1f}s  {line}")
        if event.get("kind") == "turn_started" and not steered:
            steered = True
            ref = client.post(f"/api/v2/sessions/{session_id}/steer", {"text": STEER_TEXT})["steer"]
            say(f"  {time.monotonic() - started:5.1f}s  >> steer sent while turn {ref['turnId']} is live")
        if event.get("kind") == "session_completed":
            outcome = event
            break
    summarize(client, session_id, outcome, started)


def summarize(client: Any, session_id: str, outcome: dict[str, Any], started: float) -> None:
    record = client.get(f"/api/v2/sessions/{session_id}")["data"]
    steers = client.get(f"/api/v2/sessions/{session_id}/steers")["data"]["steers"]
    delivered = [s for s in steers if s.get("state") == "delivered"]
    say(
        f"\nDone in {time.monotonic() - started:.1f}s: {record.get('status')} ({outcome.get('outcome')}), "
        f"{record.get('turnCount')} turns, {len(delivered)}/{len(steers)} steer(s) delivered"
        + "".join(f"; offset {s['offset']} -> turn {s.get('deliveredTurnId')}" for s in delivered)
        + "."
    )
    say(
        "Next: `worktrain up` runs this stack until Ctrl-C; the README's five-minute tour "
        "dispatches, steers and inspects sessions by hand."
    )
