"""The `worktrain` command. Each sub-command lives in its own module and imports its heavy
dependencies (flask, rq, anthropic) inside the command, so client commands start fast."""

from __future__ import annotations

import click

from cli.agents import mcp_command
from cli.console import console_command
from cli.coordinator import cancel, dispatch, session, sessions, steer, workflows
from cli.demo import demo_command
from cli.fleet import top, workers
from cli.follow import events, issues
from cli.forks import fork
from cli.signals import reply, signals
from cli.steerjournal import edit, retract, steers
from cli.tiers import web_command, worker_command
from cli.triggers import triggers
from cli.up import up_command
from cli.webhooks import webhooks
from cli.workspaces import worktrees


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="worktrain")
def main() -> None:
    """WorkTrain: run LLM agents through workflows and steer them while they run."""


main.add_command(up_command)
main.add_command(demo_command)
main.add_command(web_command)
main.add_command(worker_command)
main.add_command(mcp_command)
main.add_command(console_command)
for client_command in (
    dispatch,
    steer,
    steers,
    retract,
    edit,
    sessions,
    session,
    cancel,
    fork,
    issues,
    events,
    workflows,
    signals,
    reply,
    worktrees,
    workers,
    top,
    webhooks,
    triggers,
):
    main.add_command(client_command)

if __name__ == "__main__":
    main()
