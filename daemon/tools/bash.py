"""`Bash` (README's Coding sessions): one shell command in the workspace, bounded in time, output and reach.

- it runs in the sandbox (daemon/sandbox/, docs/security.md): a PID namespace of its own with its
  own /proc (it sees and signals none of WorkTrain's processes, and everything it started,
  `setsid` and `nohup` children included, is killed when it returns or times out), its own
  network namespace by default, Landlock rules (write only the workspace and a private
  TMPDIR), no capability, `no_new_privs`, rlimits. Where namespaces are not available it
  runs in a process group of its own, killed the same way (a child that left the group may
  survive, and the timeout message says so), with the other layers still on;
- stdin is closed (/dev/null): a command waiting for input gets EOF, never hangs on it;
- an interrupt of the turn (README's Managing steers, daemon/turn/interrupt.py) kills it at once, as a
timeout does;
  so does a cancel, and (polled by a watcher thread) the attempt's fence refusing, its local
  lease deadline passing, or the session's wall clock or stall limit running out (docs/durability.md);
  the fence is checked once more right before the spawn, and the launcher runs the command
  only inside the lease's local deadline (a worker frozen between the two may have lost the
  session meanwhile: it then asks Redis and tries once more; daemon/sandbox/launch.py);
- output (stdout and stderr together) is read as it comes, keeping only the first and the
  last `cap // 2` bytes: a command printing gigabytes costs no memory, and the cut is said;
- the environment is the worker's minus its secrets (API keys, tokens, passwords, the
  Redis URL, which may carry a password, and every variable of the model providers'
  credential chains: ANTHROPIC_*, AWS_*, GOOGLE_*, CLOUD_ML_*).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict, Field

from daemon.host.boottime import boottime
from daemon.sandbox import namespaces, report
from daemon.sandbox.command import sandboxed
from daemon.sandbox.launch import LAPSED, LAPSED_NOTE, NOT_AFTER_ENV
from daemon.sandbox.namespaces import Isolation
from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.turn.interrupt import STOPPED_NOTE, TurnInterrupt

DEFAULT_TIMEOUT_SECONDS = 300
MAX_TIMEOUT_SECONDS = 3600
OUTPUT_CAP_BYTES = 30_000
HALT_POLL_SECONDS = 0.2  # how often a running command asks whether its attempt must stop

SECRET_NAMES = frozenset(
    {"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "WORKTRAIN_API_TOKEN", "REDIS_URL", "REDIS_PASSWORD"}
)
SECRET_NAME_RE = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE", re.IGNORECASE)
# The model providers' credential chains (docs/DEVELOPING.md, daemon/agent/providers.py): the worker's
# alone — a profile, a role, a project or a region points a command at the fleet's cloud account
PROVIDER_PREFIXES = ("ANTHROPIC_", "AWS_", "GOOGLE_", "CLOUD_ML_", "CLOUDSDK_", "GCLOUD_")
URL_WITH_PASSWORD_RE = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]*:[^/\s@]+@", re.IGNORECASE)


HALTED_NOTE = "the command and everything it started were killed."


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment without the daemon's secrets (by name, and URLs carrying a password)."""
    return {
        name: value
        for name, value in env.items()
        if name not in SECRET_NAMES
        and not SECRET_NAME_RE.search(name)
        and not name.upper().startswith(PROVIDER_PREFIXES)
        and not URL_WITH_PASSWORD_RE.search(value)
    }


class CappedOutput:
    """Keeps the first and last `cap // 2` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def drain(self, stream: IO[bytes]) -> None:
        fd = stream.fileno()
        while chunk := os.read(fd, 65536):
            self.feed(chunk)

    def text(self) -> str:
        cut = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if cut <= 0:
            return head + tail
        return f"{head}\n[... {cut} bytes cut ...]\n{tail}"


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    output: str
    timed_out: bool
    stopped: bool = False  # killed because the turn was interrupted
    halted: str | None = None  # killed because the attempt had to stop (`halt`'s reason)


def run_command(
    command: str,
    cwd: Path,
    timeout: float,
    env: Mapping[str, str],
    cap: int = OUTPUT_CAP_BYTES,
    mode: Isolation | None = None,
    hidden: Sequence[Path] | None = None,
    interrupt: TurnInterrupt | None = None,
    read_only: Sequence[Path] = (),
    *,
    extra_read: Sequence[Path] = (),
    extra_write: Sequence[Path] = (),
    guard: Callable[[], None] | None = None,
    halt: Callable[[], str | None] | None = None,
    lease_left: Callable[[], float | None] | None = None,
) -> CommandResult:
    """Run `command` in the sandbox (daemon/sandbox/command.py) under `mode` (default: the
    best this host offers), `hidden` covered (default: the data dir's private folders), the
    folders in `read_only` not writable (a read-only workspace: Landlock grants it read
    only, and a namespace bind-mounts it read-only too). `guard` is called right before the
    spawn (the fence check: it raises to stop); while the command runs, `halt` is polled and
    a reason it gives kills the command; `lease_left` bounds when it may start (docs/durability.md)."""
    real = Path(os.path.realpath(cwd))
    ro = [Path(os.path.realpath(p)) for p in read_only]
    with sandboxed(
        command, cwd, env, read_only=any(real == p or p in real.parents for p in ro),
        read_only_mounts=read_only, extra_read=extra_read, extra_write=extra_write, mode=mode, hidden=hidden,
    ) as box:  # fmt: skip
        fence = Fencing(guard, halt, lease_left)
        result = _run(box.argv, cwd, box.env, timeout, cap, interrupt, fence)
        if fence.lease_left is not None and _lapsed(result):
            # the spawn outlived the lease's local deadline: `guard` asks Redis (a heartbeat)
            # before the second try, or raises if the session is another attempt's by now
            result = _run(box.argv, cwd, box.env, timeout, cap, interrupt, fence)
        return result


@dataclass(frozen=True)
class Fencing:
    """What keeps a command inside its attempt (ToolContext's guard, halt and lease_left)."""

    guard: Callable[[], None] | None = None
    halt: Callable[[], str | None] | None = None
    lease_left: Callable[[], float | None] | None = None

    def spawn_env(self, env: dict[str, str]) -> dict[str, str]:
        """`env` and, with a lease to keep, the moment the command must have started by."""
        left = self.lease_left() if self.lease_left is not None else None
        return env if left is None else {**env, NOT_AFTER_ENV: f"{boottime() + left:.6f}"}


def _lapsed(result: CommandResult) -> bool:
    return result.exit_code == LAPSED and result.output == LAPSED_NOTE


def _run(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    timeout: float,
    cap: int,
    interrupt: TurnInterrupt | None,
    fence: Fencing,
) -> CommandResult:
    if fence.guard is not None:
        fence.guard()  # the last step before the spawn
    halt = fence.halt
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=fence.spawn_env(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    assert process.stdout is not None
    output = CappedOutput(cap)
    reader = threading.Thread(target=output.drain, args=(process.stdout,), daemon=True)
    reader.start()
    timed_out = False
    lock = threading.Lock()
    state: dict[str, bool | str | None] = {"waiting": True, "stopped": False, "halted": None}

    def stop(reason: str | None = None) -> None:  # from the thread that heard it: the wait returns
        with lock:
            if state["waiting"]:
                state["stopped" if reason is None else "halted"] = reason or True
                _kill_group(process.pid)  # unshare's --kill-child takes the whole namespace down

    done = threading.Event()
    if halt is not None:
        threading.Thread(target=_watch_halt, args=(halt, stop, done), name="bash-halt", daemon=True).start()
    with interrupt.watch(stop) if interrupt else nullcontext():
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(process.pid)  # unshare's --kill-child takes the whole namespace down
            code = process.wait()
        finally:
            done.set()
        with lock:
            state["waiting"] = False
    stopped, halted = bool(state["stopped"]), state["halted"]
    # What is left of its group (without a namespace, nothing else reaches its children).
    _kill_group(process.pid)
    # A background child still holding the pipe must not hold the tool: wait briefly.
    reader.join(timeout=2.0 if not timed_out else 5.0)
    if not reader.is_alive():
        process.stdout.close()
    return CommandResult(code, output.text(), timed_out, stopped, halted if isinstance(halted, str) else None)


def _watch_halt(halt: Callable[[], str | None], stop: Callable[[str], None], done: threading.Event) -> None:
    """Poll `halt` while the command runs; the first reason it gives kills the command."""
    while not done.wait(HALT_POLL_SECONDS):
        reason = halt()
        if reason is not None:
            stop(reason)
            return


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself meanwhile
        os.killpg(pgid, signal.SIGKILL)


class BashInput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    command: str = Field(min_length=1, description="The shell command (run with bash -c in the workspace).")
    timeout_seconds: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TIMEOUT_SECONDS,
        description=f"Kill it after this many seconds (default {DEFAULT_TIMEOUT_SECONDS}).",
    )


def bash(args: BashInput, ctx: ToolContext) -> ToolOutput:
    if not ctx.workspace.is_dir():
        raise ToolError(f"the workspace {ctx.workspace} does not exist")
    timeout = args.timeout_seconds or DEFAULT_TIMEOUT_SECONDS
    mode = namespaces.isolation()[0]
    if ctx.read_only and not (mode.namespaced or report.current().available.landlock_abi):
        raise ToolError(
            "Bash is not available in this read-only session: this host has neither a mount namespace "
            "nor Landlock to make the workspace read-only. Use Read, Glob and Grep."
        )
    result = run_command(
        args.command,
        ctx.workspace,
        timeout,
        scrub_env(os.environ),
        mode=mode,
        interrupt=ctx.interrupt,
        read_only=[ctx.workspace] if ctx.read_only else (),
        guard=ctx.guard,
        halt=ctx.halt,
        lease_left=ctx.lease_left,
    )
    if result.halted:
        return ToolOutput(
            f"{result.output}\n[WorkTrain] Stopped ({result.halted}): {HALTED_NOTE}", is_error=True
        )
    if result.stopped:
        return ToolOutput(f"{result.output}\n{STOPPED_NOTE}", is_error=True)
    if result.timed_out:
        killed = (
            "the command and everything it started were killed"
            if mode.namespaced
            else "the command's process group was killed (a child that left it, e.g. with setsid, "
            "may still run: no PID namespace on this host)"
        )
        return ToolOutput(f"{result.output}\n[timed out after {timeout}s: {killed}]", is_error=True)
    return ToolOutput(f"{result.output}\n[exit code {result.exit_code}]")


BASH = Tool(
    "Bash",
    "Run a shell command in the workspace (bash -c). stdin is closed; the command is killed "
    f"after timeout_seconds (default {DEFAULT_TIMEOUT_SECONDS}); long output keeps its head and tail.",
    BashInput,
    bash,
)
