"""The `worktrain up` supervisor: Redis, (the fake model), web and workers on one machine.

Start order: lock the data dir, Redis (unless REDIS_URL is set), the fake model server (when
there is no ANTHROPIC_API_KEY), `worktrain web`, `worktrain worker`; then wait for /readyz.
Each child runs in its own session, so a Ctrl-C in the terminal reaches only the supervisor,
which stops them in order (`STOP_ORDER`): the workers first (SIGTERM, then SIGKILL of whatever
is left of their trees after a deadline: a running session is handed over, which needs Redis
and only Redis), then the web tier, then the fake model, then Redis last (SIGTERM: it flushes
the AOF), all within `STOP_BUDGET` seconds. Nothing of the stop depends on the terminal: what
`up` says goes through `say`, which must never raise (cli/up.py's `UpOutput` keeps its lines
in `<data>/logs/up.log` and survives a closed or broken stdout, as when `| tee up.log` dies of
the same Ctrl-C first).

A dead worker tier is restarted (`worktrain worker` restarts its own processes; this is its
parent dying: a crash, the OOM killer, a kill -9). Each death is said on the terminal: which
child, its pid, exit code or signal, how long it was up, the tail of its log, and when it
starts again, with the backoff of cli/restartpolicy.py (0.5 s doubling to 30 s; reset after
30 s up). The new process gets its secrets by a fresh pipe as at start and appends to the
same log (after a line that says so). The sessions the dead process ran resume on the
restarted process (or another): handed over at their turn boundary by the processes it
left behind (worker/lifeline.py), else by the reaper once their lease lapses. After 5
crashes within 60 s `up` gives up: the crash is no transient fault, so the stack stops and
says why (exit code 1). A stop request during a backoff stops at once; nothing is restarted
after one.

A dead web tier, fake model or Redis stops the whole stack, as does a start that fails:
each is a single point the stack cannot run without (no steering without web, no model
answers without the fake model, no state without Redis), and their deaths are rare enough
to be a bug or a fault to look at (Redis: a disk full, the OOM killer; restarting it could
quietly lose the last second of AOF `everysec`), so they are reported, never masked.

Secrets (docs/security.md) reach the children through inherited pipes (daemon/host/secrets.py), never
their environment or argv: the web tier gets the API token and the Redis password, the
workers the Anthropic key and the Redis password. The embedded Redis requires a password,
generated once per data dir (`<data>/redis/password`, owner-only). The data dir, logs and
state files are owner-only; the children start with the umask `up` was started with.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from cli import procs
from cli.restartpolicy import CrashHistory, GiveUp, RestartPolicy
from cli.runlock import RunLock
from cli.startup import Interrupted, StackFailed, port_in_use
from daemon.host import secrets as secret_handoff
from daemon.host.private import open_private, private_dir

# The stop, in order: (child name, seconds it has before SIGKILL); Redis after them all.
STOP_ORDER = (("worker", 5.0), ("web", 2.0), ("fakemodel", 0.5))  # with Redis: STOP_BUDGET
REDIS_STOP_SECONDS = 2.5  # redis-server: SIGTERM (flushes the AOF), then SIGKILL
STOP_BUDGET = 10.0
READY_TIMEOUT = 60.0
DEFAULT_REDIS_PORT = 6390


@dataclass(frozen=True)
class StackOptions:
    data_dir: Path
    port: int = 3456
    bind: str = "127.0.0.1"
    workers: int = 2
    redis_url: str | None = None  # an external Redis; None starts the embedded one
    redis_port: int | None = None  # embedded Redis; None: DEFAULT_REDIS_PORT if free, else any
    fake_model: bool = False
    fake_latency: float = 0.0  # seconds the fake model takes per answer (room to steer)
    verbose: bool = False  # children log to this terminal instead of <data>/logs/*.log
    extra_env: dict[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict)  # variable -> value (daemon.host.secrets)


@dataclass(frozen=True)
class Launch:
    """How a child was started: what a restart repeats (with a fresh secrets pipe)."""

    argv: list[str]
    env: dict[str, str]
    secrets: Mapping[str, str]


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path | None
    launch: Launch
    crashes: CrashHistory | None = None  # None: its death stops the stack
    started_at: float = field(default_factory=time.monotonic)
    restart_at: float | None = None  # while it waits out its backoff (its process is dead)
    restarts: int = 0

    def tail(self, lines: int = 15) -> str:
        if self.log_path is None:
            return ""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def current_umask() -> int:
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def local_host(bind: str) -> str:
    """The host part of a URL that reaches a server listening on `bind` (IPv6 in brackets)."""
    host = bind.strip("[]")
    if host in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


def describe_exit(code: int) -> str:
    """A child's death in words: `exited with code 3`, `was killed by SIGKILL`."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class Supervisor:
    def __init__(
        self,
        options: StackOptions,
        say: Callable[[str], None] = print,
        restart_policy: RestartPolicy | None = None,
    ) -> None:
        self.options = options
        self.restart_policy = restart_policy or RestartPolicy()
        self.say = say
        self.data_dir = options.data_dir.expanduser().resolve()
        self.lock = RunLock(self.data_dir)
        self.stop_requested = threading.Event()
        self.children: list[Child] = []
        self.redis: Any = None  # cli.embedded.SupervisedRedis when embedded
        self.redis_url = options.redis_url or ""
        self.api_url = f"http://{local_host(options.bind)}:{options.port}"
        self.model_url: str | None = None
        self.state: dict[str, Any] = {}
        self.subreaper = False  # True once orphans of our children are re-parented to us
        self.secrets: dict[str, str] = dict(options.secrets)
        self.token_generated = False  # True when the token is the data dir's (not given by the user)
        self.umask = current_umask()  # the tiers' (files an agent writes keep it); Redis gets 077
        self._stopped = False

    def adopt_orphans(self) -> None:
        """Make this process a child subreaper (for `up` and `demo`, which own their process):
        whatever our children leave behind stays in our tree, and the final sweep finds it."""
        self.subreaper = procs.become_subreaper()

    # ---- signals -------------------------------------------------------------------------
    def install_signal_handlers(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        self.stop_requested.set()

    # ---- start -----------------------------------------------------------------------------
    def start(self) -> dict[str, Any]:
        """Bring the stack up; raises AlreadyRunning, StackFailed or Interrupted."""
        self.lock.acquire()
        self.lock.write_state({"pid": os.getpid(), "apiUrl": self.api_url, "status": "starting"})
        self._ensure_api_token()
        if port_in_use(self.options.bind, self.options.port):
            raise StackFailed(
                f"port {self.options.port} is already in use on {self.options.bind}; pass --port"
            )
        procs.prepare_die_with_parent()
        private_dir(self.data_dir / "logs")
        private_dir(self.data_dir / "workspaces")
        if not self.options.redis_url:
            self._start_redis()
        if self.options.fake_model:
            self._start_fake_model()
        env = self.child_env()
        self._spawn("web", self.web_command(), env, self.secrets_for("web"))
        self._spawn("worker", self.worker_command(), env, self.secrets_for("worker"), restart=True)
        self._wait_ready()
        self.state = self._state()
        self.lock.write_state(self.state)
        return self.state

    def _ensure_api_token(self) -> None:
        """docs/security.md: the stack is never open. Without WORKTRAIN_API_TOKEN, the data dir's
        own token (daemon/host/apitoken.py): the web tier gets it by pipe, the CLI reads it."""
        from daemon.host.apitoken import load_or_create_token

        if not self.secrets.get(secret_handoff.API_TOKEN):
            self.secrets[secret_handoff.API_TOKEN] = load_or_create_token(self.data_dir)
            self.token_generated = True

    @property
    def api_token(self) -> str | None:
        return self.secrets.get(secret_handoff.API_TOKEN)

    def _start_redis(self) -> None:
        from cli.embedded import SupervisedRedis, pick_redis_port
        from daemon.host.embedded_redis import load_or_create_password, password_file

        port = pick_redis_port(self.options.redis_port, DEFAULT_REDIS_PORT)
        redis_dir = self.data_dir / "redis"
        password = load_or_create_password(password_file(redis_dir))
        self.secrets[secret_handoff.REDIS_PASSWORD] = password
        self.redis = SupervisedRedis(redis_dir, port=port, password=password)
        self.redis_url = self.redis.start(stop_flag=self.stop_requested)

    def _start_fake_model(self) -> None:
        from cli.embedded import fake_model_command
        from daemon.host.embedded_redis import free_port

        port = free_port()
        env = secret_handoff.without_secrets({**os.environ, **self.options.extra_env})
        self._spawn("fakemodel", fake_model_command(port, self.options.fake_latency), env, {})
        self.model_url = f"http://127.0.0.1:{port}"
        self._wait_http(f"{self.model_url}/healthz", "the fake model server", 20.0)

    def web_command(self) -> list[str]:
        return [*self.cli(), "web", "--bind", self.options.bind, "--port", str(self.options.port)]

    def worker_command(self) -> list[str]:
        return [*self.cli(), "worker", "--processes", str(self.options.workers)]

    @staticmethod
    def cli() -> list[str]:
        """`worktrain` as this very interpreter runs it (no reliance on PATH)."""
        return [sys.executable, "-m", "cli"]

    def child_env(self) -> dict[str, str]:
        """The tiers' environment: no secret in it (they come by pipe, `secrets_for`)."""
        env = secret_handoff.without_secrets({**os.environ, **self.options.extra_env})
        env.update(
            REDIS_URL=self.redis_url,
            WORKTRAIN_DATA_DIR=str(self.data_dir),
            WORKTRAIN_URL=self.api_url,
            WORKTRAIN_BIND=self.options.bind,
            WORKTRAIN_PORT=str(self.options.port),
            PYTHONUNBUFFERED="1",
        )
        if self.model_url is not None:
            env["ANTHROPIC_BASE_URL"] = self.model_url
        return env

    def secrets_for(self, role: str) -> dict[str, str]:
        held = dict(self.secrets)
        if self.model_url is not None:
            held[secret_handoff.API_KEY] = "worktrain-fake-model"  # the SDK wants one; the fake ignores it
        return secret_handoff.keep(role, held)

    def _spawn(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        secrets: Mapping[str, str],
        restart: bool = False,
    ) -> Child:
        """Start a child; with `restart`, a death of it is restarted (self.restart_policy)."""
        log_path = None if self.options.verbose else self.data_dir / "logs" / f"{name}.log"
        launch = Launch(argv, env, secrets)
        crashes = CrashHistory(self.restart_policy) if restart else None
        child = Child(name, self._popen(launch, log_path), log_path, launch, crashes)
        self.children.append(child)
        return child

    def _popen(self, launch: Launch, log_path: Path | None, note: str = "") -> subprocess.Popen[bytes]:
        """Start `launch`, appending to `log_path` (after `note`, a line of ours, if given)."""
        out: IO[bytes] | None = None
        if log_path is not None:
            out = os.fdopen(open_private(log_path, os.O_WRONLY | os.O_APPEND), "ab")
            if note:
                out.write(f"{note}\n".encode())
                out.flush()
        secrets = launch.secrets
        fd, fd_env = secret_handoff.pipe_for(secrets) if secrets else (None, {})
        try:
            return subprocess.Popen(
                launch.argv,
                env={**launch.env, **fd_env},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT if out is not None else None,
                start_new_session=True,
                pass_fds=(fd,) if fd is not None else (),
                umask=self.umask,
                preexec_fn=procs.die_with_parent,  # before any thread starts
            )
        finally:
            if out is not None:
                out.close()
            if fd is not None:
                os.close(fd)

    # ---- children that die -----------------------------------------------------------------
    def _tend_children(self) -> None:
        """Restart the dead workers whose backoff is over; StackFailed for a death that
        stops the stack (any other child, Redis, a worker given up on)."""
        now = time.monotonic()
        for child in self.children:
            if child.restart_at is not None:
                if now >= child.restart_at and not self.stop_requested.is_set():
                    self._restart(child)
                continue
            code = child.process.poll()
            if code is None:
                continue
            report = self._death_report(child, code, now)
            if child.crashes is None:
                raise StackFailed(report)
            decision = child.crashes.record(started=child.started_at, died=now)
            if isinstance(decision, GiveUp):
                raise StackFailed(
                    f"{report}\n{child.name} crashed {decision.crashes} times within "
                    f"{decision.window_seconds:g}s: giving up"
                )
            child.restart_at = now + decision.delay
            self.say(f"worktrain: {report}")
            policy = self.restart_policy
            self.say(
                f"worktrain: restarting {child.name} in {decision.delay:g}s (crash {decision.crashes}"
                f" within {policy.window_seconds:g}s; crash {policy.max_crashes} stops the stack)"
            )
        self._check_redis()

    def _death_report(self, child: Child, code: int, now: float) -> str:
        where = f" (log: {child.log_path})" if child.log_path else ""
        tail = child.tail()
        detail = f"\n--- last lines of {child.name}.log ---\n{tail}" if tail else ""
        up_for = f" after {now - child.started_at:.1f}s up" if child.crashes is not None else ""
        return f"{child.name} (pid {child.process.pid}) {describe_exit(code)}{up_for}{where}{detail}"

    def _restart(self, child: Child) -> None:
        child.restarts += 1
        note = f"--- worktrain up: {child.name} restarted (restart {child.restarts}) ---"
        try:
            child.process = self._popen(child.launch, child.log_path, note)
        except (OSError, secret_handoff.SecretsError) as exc:  # no fork, no pipe, a full disk
            raise StackFailed(f"could not restart {child.name}: {exc}") from exc
        child.started_at = time.monotonic()
        child.restart_at = None
        self.say(f"worktrain: {child.name} restarted (pid {child.process.pid})")
        if self.state:  # once up: up.json names the new pid
            self.state = self._state()
            self.lock.write_state(self.state)

    def _check_redis(self) -> None:
        process = self.redis.process if self.redis is not None else None
        if process is not None and (code := process.poll()) is not None:
            log = self.data_dir / "redis" / "redis.log"
            raise StackFailed(f"redis-server (pid {process.pid}) {describe_exit(code)} (log: {log})")

    def _next_tick(self) -> float:
        """Seconds until the next look at the children: 0.25, or sooner for a restart due."""
        due = [c.restart_at for c in self.children if c.restart_at is not None]
        return max(0.0, min([0.25, *(at - time.monotonic() for at in due)]))

    def _own_pids(self) -> set[int]:
        """Our Popen children (Redis included): reap_orphans must leave their exit status."""
        pids = {c.process.pid for c in self.children}
        if self.redis is not None and self.redis.process is not None:
            pids.add(self.redis.process.pid)
        return pids

    def _wait_http(self, url: str, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.stop_requested.is_set():
                raise Interrupted
            self._tend_children()
            try:
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise StackFailed(f"{what} did not become ready at {url} within {timeout:.0f}s")
            time.sleep(0.1)

    def _wait_ready(self) -> None:
        self._wait_http(f"{self.api_url}/readyz", "the web tier", READY_TIMEOUT)

    def _state(self) -> dict[str, Any]:
        from cli.embedded import redis_cli_line
        from daemon.host.embedded_redis import password_file
        from daemon.host.secrets import split_url_password

        shown_url = split_url_password(self.redis_url)[0]  # never a password on screen or on disk
        password_path = password_file(self.data_dir / "redis") if self.redis is not None else None
        return {
            "pid": os.getpid(),
            "apiUrl": self.api_url,
            "status": "up",
            "redisUrl": shown_url,
            "redisCli": redis_cli_line(shown_url, password_path),
            "embeddedRedis": self.redis is not None,
            "fakeModelUrl": self.model_url,
            "dataDir": str(self.data_dir),
            "workers": self.options.workers,
            "children": {c.name: c.process.pid for c in self.children},
            "logs": {c.name: str(c.log_path) for c in self.children if c.log_path},
        }

    # ---- run -------------------------------------------------------------------------------
    def watch(self) -> int:
        """Block until a stop is requested (0), or a death stops the stack (1); dead workers
        are restarted meanwhile."""
        while not self.stop_requested.wait(self._next_tick()):
            try:
                self._tend_children()
            except StackFailed as exc:
                self.say(f"worktrain: {exc}")
                self.say("worktrain: stopping the whole stack.")
                return 1
            if self.subreaper:
                procs.reap_orphans(self._own_pids())
        return 0

    # ---- stop ------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop everything, in order, within STOP_BUDGET seconds; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for name, seconds in STOP_ORDER:
            children = [c for c in self.children if c.name == name]
            started = time.monotonic()
            self._stop_children(children, seconds)
            if children:
                self.say(f"worktrain: {name} stopped ({time.monotonic() - started:.1f}s)")
        named = {name for name, _ in STOP_ORDER}
        self._stop_children([c for c in self.children if c.name not in named], 1.0)  # none today
        if self.redis is not None:
            started = time.monotonic()
            self.redis.stop(timeout=REDIS_STOP_SECONDS)
            self.say(f"worktrain: redis-server stopped ({time.monotonic() - started:.1f}s)")
        self._sweep()
        self.lock.release()

    def _stop_children(self, children: list[Child], seconds: float) -> None:
        """SIGTERM each child, wait, then SIGKILL whatever is left of their process trees."""
        if not children:
            return
        keep = frozenset(self._running_pids() - {c.process.pid for c in children})
        tree = [p for c in children for p in procs.descendants(c.process.pid)]
        for child in children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and any(c.process.poll() is None for c in children):
            time.sleep(0.05)
        for child in children:
            procs.kill_group(child.process.pid, signal.SIGKILL)
            if child.process.poll() is None:
                self.say(f"worktrain: {child.name} did not stop within {seconds:.0f}s; killed it")
                child.process.kill()
            child.process.wait()
        # Their descendants, and any orphan re-parented to us if we are a subreaper: not the
        # children still to stop later (Redis, the fake model) nor what runs below them.
        orphans = procs.descendants(os.getpid(), exclude=keep) if self.subreaper else []
        procs.signal_all(tree + orphans, signal.SIGKILL)

    def _running_pids(self) -> set[int]:
        pids = {c.process.pid for c in self.children if c.process.poll() is None}
        if self.redis is not None and self.redis.process is not None and self.redis.process.poll() is None:
            pids.add(self.redis.process.pid)
        return pids

    def _sweep(self) -> None:
        """Whatever is still below us (re-parented orphans included): kill and reap it.

        Only a subreaper owns everything below it; a supervisor embedded in another program
        (tests) leaves that program's other children alone."""
        if not self.subreaper:
            return
        for _ in range(20):
            left = procs.descendants(os.getpid())
            if not left:
                break
            procs.signal_all(left, signal.SIGKILL)
            time.sleep(0.05)
        procs.reap_orphans(set())
