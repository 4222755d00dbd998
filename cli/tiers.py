"""`worktrain web` and `worktrain worker`: one tier each (compose, hosts sharing REDIS_URL)."""

from __future__ import annotations

import click


@click.command("web")
@click.option("--standalone", is_flag=True, help="No Redis: read-only console from the JSONL mirrors.")
def web_command(standalone: bool) -> None:
    """Serve the /api/v2 HTTP API under a production WSGI server."""
    raise click.ClickException("not implemented yet")


@click.command("worker")
@click.option("--processes", "-n", default=1, show_default=True, help="Worker processes to run.")
def worker_command(processes: int) -> None:
    """Run RQ workers on queue `worktrain`: each job runs one agent session to its end."""
    raise click.ClickException("not implemented yet")
