"""`worktrain web` and `worktrain worker`: one tier each (compose, hosts sharing REDIS_URL)."""

from __future__ import annotations

import logging
import os
import sys

import click

from cli.startstop import stops_cleanly_while_starting

# Sessions per worker process by default: README "Workers", docs/benchmarks.md "Many
# sessions per process" (why 16).
DEFAULT_CONCURRENCY = 16

log = logging.getLogger(__name__)

concurrency_option = click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(1, 1024),
    envvar="WORKTRAIN_CONCURRENCY",
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Sessions each worker process runs at once (threads); 1: a forked process per "
    "session [env WORKTRAIN_CONCURRENCY].",
)


def name_process(role: str) -> None:
    """`worktrain web --port 3456` in `ps` and `top -c` (the command line), `worktrain web` /
    `worktrain worke` / `worktrain up` in `ps -o comm` and `top` (the kernel's 15 bytes), rather
    than `python -m cli ...` (after `seal`, which may re-execute the process and so reset
    both). The arguments stay, so two workers on one host still read apart.

    SPT_NOENV: setproctitle would otherwise move the environment to make room for a long
    title, and `/proc/PID/environ` would then read the title (that file is how tests and
    operators find which processes a stack started); the command line has room enough."""
    os.environ["SPT_NOENV"] = "1"  # before the first title is set, here or by RQ and granian
    import setproctitle

    from daemon.host.prctl import set_process_name

    given = sys.argv[1:]
    options = given[given.index(role) + 1 :] if role in given else []
    setproctitle.setproctitle(" ".join(["worktrain", role, *options]))
    if not set_process_name(f"worktrain {role}"):
        log.info("the process could not be named (not Linux?)")


@click.command("web")
@click.option("--standalone", is_flag=True, help="No Redis: read-only console from the JSONL mirrors.")
@click.option("--bind", default=None, help="Address to listen on  [default: WORKTRAIN_BIND, else 127.0.0.1]")
@click.option(
    "--port", type=click.IntRange(1, 65535), default=None, help="[default: WORKTRAIN_PORT, else 3456]"
)
@click.option(
    "--server",
    type=click.Choice(["granian", "gunicorn"]),
    default="granian",
    show_default=True,
    help="WSGI server (granian measured faster; docs/benchmarks.md).",
)
@click.option(
    "--workers", type=click.IntRange(1, 64), default=None, help="Processes  [default: 2 granian, 3 gunicorn]"
)
@click.option(
    "--threads",
    type=click.IntRange(1, 256),
    default=None,
    help="Threads each  [default: 8 granian, 4 gunicorn]",
)
@stops_cleanly_while_starting("web")
def web_command(
    standalone: bool,
    bind: str | None,
    port: int | None,
    server: str,
    workers: int | None,
    threads: int | None,
) -> None:
    """Serve the /api/v2 HTTP API under a production WSGI server.

    Without WORKTRAIN_API_TOKEN it only listens on a loopback address (and answers only
    loopback Host names); a token must be at least 32 characters and no placeholder.
    """
    from daemon.triggers.secretnames import seal_with_triggers

    # first: secrets (and the triggers file's webhook secrets) leave the environment
    seal_with_triggers("web")
    name_process("web")
    # Imported here so that `worktrain --help` and the client commands stay fast.
    from daemon.host.bind import UnsafeBind
    from daemon.host.config import ConfigError, load_settings
    from daemon.triggers.loading import TriggerFileError
    from web.listener import PortInUse
    from web.serve import ServeOptions, serve

    try:
        settings = load_settings()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    options = ServeOptions(
        host=bind or settings.bind,
        port=port or settings.port,
        workers=workers,
        threads=threads,
        standalone=standalone,
        server=server,
    )
    try:
        serve(settings, options)
    except (UnsafeBind, PortInUse) as exc:
        raise click.ClickException(str(exc)) from None
    except TriggerFileError as exc:
        raise click.ClickException(f"the triggers file cannot be used:\n{exc}") from None


@click.command("worker")
@click.option(
    "--processes",
    "-n",
    type=click.IntRange(1, 512),
    default=1,
    show_default=True,
    help="Worker processes to run.",
)
@concurrency_option
@click.option("--burst", is_flag=True, help="Quit once the queue is empty and every session ended.")
@stops_cleanly_while_starting("worker")
def worker_command(processes: int, concurrency: int, burst: bool) -> None:
    """Run RQ workers on queue `worktrain`: each job runs one agent session to its end.

    Each process runs up to --concurrency sessions at once, each one RQ job (`rq info`
    shows it started). SIGTERM or Ctrl-C: each running session's live turn is cut short (a
    model call in flight abandoned) and the session handed over (checkpointed, lease
    released, resume job enqueued): the next worker resumes it at once.
    Redis: REDIS_URL (default redis://127.0.0.1:6379/0). Only WorkTrain's session job runs:
    any other job on the queue is failed unrun.
    """
    from daemon.triggers.secretnames import seal_with_triggers

    # first: secrets (and the triggers file's API tokens) leave the environment; a worker never
    # keeps the API token
    seal_with_triggers("worker")
    name_process("worker")
    # Imported here so that `worktrain --help` and the client commands stay fast.
    from daemon.host.config import ConfigError, load_settings
    from daemon.sandbox.report import SandboxUnavailable
    from daemon.triggers.loading import TriggerFileError
    from worker.pool import RedisUnavailable, run_workers
    from worker.shared import ModelUnavailable

    try:
        run_workers(load_settings(), processes, burst=burst, concurrency=concurrency)
    except (ConfigError, RedisUnavailable, SandboxUnavailable, ModelUnavailable) as exc:
        raise click.ClickException(str(exc)) from None
    except TriggerFileError as exc:
        raise click.ClickException(f"the triggers file cannot be used:\n{exc}") from None
