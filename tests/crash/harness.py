"""The crash tests' stack: real redis-server, `worktrain web`, `worktrain worker` processes and
the fake Anthropic API (in this process, so each session's calls can be held and counted).

Every process is started in a session of its own and killed at the end, its process group
with SIGKILL; work horses (RQ puts each in a process group of its own) die with their worker
(worker/lifeline.py), and any horse pid a session record ever named is killed as well.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import FakeModelServer, reply, text, tool
from daemon.host.embedded_redis import RedisServer, free_port

ROOT = Path(__file__).resolve().parents[2]
WORKTRAIN = [sys.executable, "-m", "cli"]
TOKEN = "crash-test-token-4e8b1c9d2a7f6e3b5c0d9a8f7e6b5c4d"
WORKFLOW_ID = "crash-four"
STEPS = 4
WORKFLOW = {
    "id": WORKFLOW_ID,
    "name": "Four steps",
    "description": "Four steps, each one turn of Read, Bash and continue_workflow.",
    "version": "1.0.0",
    "steps": [
        {"id": f"s{i}", "title": f"Step {i}", "prompt": f"Step {i} of {STEPS}: look, run, move on."}
        for i in range(1, STEPS + 1)
    ],
}
NOTES = "Read the README, ran the check command, and everything this step asked for is done."
SESSION_LINE = re.compile(r"- Session: (sess_[0-9A-HJKMNP-TV-Z]{26})")


def session_of(system: str) -> str:
    match = SESSION_LINE.search(system)
    return match.group(1) if match else ""


# --- the fake model --------------------------------------------------------------------------


class SessionModel:
    """The fake API with a rule that walks any workflow with tool calls: each turn reads
    README.md, runs a short Bash command and continues the workflow. Calls can be held per
    session (`hold_when(sessionId, nth call of that session)`) until `release(sessionId)`,
    and `on_call(sessionId, n, request)` runs first on every call (the random-kill test
    kills from there)."""

    def __init__(self, latency: float = 0.05, bash_sleep: float = 0.1) -> None:
        self.latency = latency
        self.bash_sleep = bash_sleep
        self.server = FakeModelServer(rule=self.rule)
        self.calls: Counter[str] = Counter()
        self.hold_when: Callable[[str, int], bool] = lambda sid, n: False
        self.on_call: Callable[[str, int, ModelRequest], None] = lambda sid, n, request: None
        self._gates: dict[str, threading.Event] = {}
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> str:
        return self.server.start()

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            gates = list(self._gates.values())
        for gate in gates:
            gate.set()
        self.server.stop()

    def _gate(self, sid: str) -> threading.Event:
        with self._lock:
            gate = self._gates.setdefault(sid, threading.Event())
            if self._closed:
                gate.set()
            return gate

    def release(self, sid: str) -> None:
        self._gate(sid).set()

    def held(self, sid: str) -> bool:
        with self._lock:
            return sid in self._held

    def rule(self, request: ModelRequest) -> ModelReply:
        sid = session_of(request.system)
        with self._lock:
            self.calls[sid] += 1
            n = self.calls[sid]
        self.on_call(sid, n, request)
        if self.hold_when(sid, n):
            gate = self._gate(sid)
            with self._lock:
                self._held.add(sid)
            gate.wait(120)
            with self._lock:
                self._held.discard(sid)
            gate.clear()
        time.sleep(self.latency)
        return self.answer(request)

    def answer(self, request: ModelRequest) -> ModelReply:
        """The reply once holds and latency are through (a subclass answers otherwise)."""
        turn = sum(1 for m in request.messages if m.role == "assistant") + 1
        return reply(
            text(f"Turn {turn}: reading, checking, moving on."),
            tool("Read", path="README.md"),
            tool("Bash", command=f"sleep {self.bash_sleep}; echo checked"),
            tool("continue_workflow", notes=NOTES),
        )

    def requests_of(self, sid: str) -> list[dict[str, Any]]:
        return [r for r in list(self.server.requests) if session_of(system_text(r)) == sid]


def system_text(request: dict[str, Any]) -> str:
    system = request.get("system") or ""
    if isinstance(system, list):
        return "".join(str(block.get("text", "")) for block in system)
    return str(system)


def user_texts(request: dict[str, Any]) -> str:
    """Every text block of every user message of a recorded request, in order."""
    parts = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            parts.append(content)
            continue
        parts.extend(block["text"] for block in content if block.get("type") == "text")
    return "\n\n".join(parts)


# --- processes -------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self, tail: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def kill_tree(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)  # started with start_new_session: pgid == pid
        if sig == signal.SIGKILL:
            self.process.wait(10)


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped yet counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def running(*argv: str) -> bool:
    """Whether a process with exactly this argv runs on this host. A Bash tool command runs in
    a PID namespace of its own (daemon/sandbox/namespaces.py), where its `$$` is no host pid: tests find
    it from outside by a command line nothing else has (e.g. `sleep 30.123456`)."""
    needle = "\0".join(argv).encode() + b"\0"
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if proc.joinpath("cmdline").read_bytes() == needle and alive(int(proc.name)):
                    return True
            except OSError:
                continue  # it ended while we looked
    return False


def parent_of(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def ancestors(pid: int) -> list[int]:
    chain = []
    while pid > 1:
        pid = parent_of(pid)
        chain.append(pid)
    return chain


def descendants(pid: int) -> list[int]:
    """Every live process whose ancestors include `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and pid in ancestors(int(entry.name)):
            found.append(int(entry.name))
    return found


def pid_of_worker(worker_id: str) -> int:
    """The pid in a worker id `host:pid:random` (the work horse running the session)."""
    return int(worker_id.rsplit(":", 2)[1])


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 60.0, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


# --- the stack -------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int  # 0: no HTTP answer (connection refused or reset)
    body: dict[str, Any]
    headers: dict[str, str]  # names in lower case


def _lower(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


@dataclass
class Stack:
    tmp: Path
    lease_seconds: float = 2.0
    appendfsync: str = "everysec"
    faults: bool = False
    idle_wait_seconds: float = 2.0
    tier_redis_url: str | None = None  # where web and workers reach Redis (a proxy); default direct
    model: SessionModel = field(default_factory=SessionModel)
    procs: list[Proc] = field(default_factory=list)
    redis_server: RedisServer | None = None
    client: redis.Redis | None = None
    web_port: int = 0
    workspace: Path = field(init=False)
    horses: set[int] = field(default_factory=set)
    # sessions per worker process: 1 (a work horse per session: what these crash tests kill,
    # freeze and count) unless a test asks for more (tests/crash/test_many_sessions.py)
    concurrency: int = 1
    extra_env: dict[str, str] = field(default_factory=dict)  # more settings for the tiers
    redis_args: tuple[str, ...] = ()  # more redis-server arguments (tests/crash/sentinels.py)

    def __post_init__(self) -> None:
        self.workspace = self.tmp / "ws"
        self.workspace.mkdir(parents=True, exist_ok=True)
        (self.workspace / "README.md").write_text("# A project the crash tests work on\n")
        workflows = self.tmp / "workflows"
        workflows.mkdir(exist_ok=True)
        (workflows / f"{WORKFLOW_ID}.json").write_text(json.dumps(WORKFLOW))

    # processes

    @property
    def env(self) -> dict[str, str]:
        assert self.redis_server is not None
        env = {
            **os.environ,
            "REDIS_URL": self.tier_redis_url or self.redis_server.url,
            "WORKTRAIN_DATA_DIR": str(self.tmp / "data"),
            "WORKTRAIN_WORKFLOWS_DIR": str(self.tmp / "workflows"),
            "WORKTRAIN_API_TOKEN": TOKEN,
            "WORKTRAIN_LEASE_SECONDS": str(self.lease_seconds),
            "WORKTRAIN_IDLE_WAIT_SECONDS": str(self.idle_wait_seconds),
            "WORKTRAIN_MODEL": "claude-fake",
            "ANTHROPIC_BASE_URL": self.model.server.url,
            "ANTHROPIC_API_KEY": "crash-test-dummy-key",
            "HOME": str(self.tmp),
        }
        if self.faults:
            env["WORKTRAIN_FAULTS"] = "1"
        return {**env, **self.extra_env}

    def start(self, workers: int = 1, processes: int = 1, redis_port: int | None = None) -> Stack:
        return self.start_backends(redis_port).start_tiers(workers, processes)

    def start_backends(self, redis_port: int | None = None) -> Stack:
        """The fake model and Redis (what the tiers need before they start)."""
        self.model.start()
        self.redis_server = RedisServer(
            self.tmp / "redis", port=redis_port, appendfsync=self.appendfsync, extra_args=self.redis_args
        )
        self.redis_server.start()
        self.client = redis.Redis.from_url(self.redis_server.url, decode_responses=True)
        return self

    def start_tiers(self, workers: int = 1, processes: int = 1) -> Stack:
        """The web tier and the workers, started together (each start is a second or two of
        imports, and none waits for another: they meet in Redis), then each waited for."""
        self.web_port = free_port()
        web = self.spawn_web()
        started = [self.spawn_worker(f"worker{i + 1}", processes) for i in range(workers)]
        self.wait_web(web)
        for worker in started:
            self.wait_worker(worker, processes)
        return self

    def spawn(self, name: str, args: list[str]) -> Proc:
        log_path = self.tmp / f"{name}.log"
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                args, env=self.env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        proc = Proc(name, process, log_path)
        self.procs.append(proc)
        return proc

    def start_web(self) -> Proc:
        return self.wait_web(self.spawn_web())

    def spawn_web(self) -> Proc:
        args = [*WORKTRAIN, "web", "--bind", "127.0.0.1", "--port", str(self.web_port), "--workers", "1"]
        return self.spawn("web", args)

    def wait_web(self, web: Proc) -> Proc:
        wait_until(lambda: self.ready() == 200 or web.process.poll() is not None, "web /readyz")
        assert web.process.poll() is None, web.log()
        return web

    def start_worker(self, name: str, processes: int = 1, concurrency: int | None = None) -> Proc:
        return self.wait_worker(self.spawn_worker(name, processes, concurrency), processes)

    def spawn_worker(self, name: str, processes: int = 1, concurrency: int | None = None) -> Proc:
        sessions = str(concurrency or self.concurrency)
        return self.spawn(name, [*WORKTRAIN, "worker", "--processes", str(processes), "-c", sessions])

    def wait_worker(self, worker: Proc, processes: int) -> Proc:
        wait_until(
            lambda: worker.log().count("Listening on") >= processes or worker.process.poll() is not None,
            f"{worker.name} to listen",
        )
        assert worker.process.poll() is None, worker.log()
        return worker

    def freeze(self, worker: Proc, horse: int, sig: int = signal.SIGSTOP) -> None:
        """SIGSTOP (or SIGCONT) a whole worker tier: its process group, and the work horse,
        which RQ puts in a process group of its own."""
        os.killpg(worker.pid, sig)
        if self.ours(horse):
            os.kill(horse, sig)

    def thaw(self, worker: Proc, horse: int) -> None:
        self.freeze(worker, horse, signal.SIGCONT)

    def freeze_tier(self, worker: Proc) -> list[int]:
        """SIGSTOP a worker tier and every process below it (horses are in groups of their
        own); returns what was stopped, for `thaw_tier`."""
        stopped = [pid for pid in descendants(worker.pid) if self.ours(pid)]
        os.killpg(worker.pid, signal.SIGSTOP)
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        return stopped

    def thaw_tier(self, worker: Proc, stopped: list[int]) -> None:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        os.killpg(worker.pid, signal.SIGCONT)

    def proc(self, name: str) -> Proc:
        return next(p for p in reversed(self.procs) if p.name == name)

    def worker_running(self, sid: str) -> Proc:
        """The `worktrain worker` whose tree runs the session's work horse now."""
        horse = pid_of_worker(self.record(sid)["worker"])
        chain = ancestors(horse)
        return next(p for p in self.procs if p.name.startswith("worker") and p.pid in chain)

    def close(self) -> None:
        self.model.stop()
        for sid in self._session_ids():
            worker = self.record(sid).get("worker")
            if worker:
                self.horses.add(pid_of_worker(worker))
        for proc in self.procs:
            if proc.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGCONT)  # a frozen tree dies too
                proc.kill_tree()
        for pid in self.horses:  # should have died with their workers; an orphan would not
            if alive(pid) and self.ours(pid):
                os.kill(pid, signal.SIGKILL)
        if self.client is not None:
            self.client.close()
        if self.redis_server is not None:
            self.redis_server.kill()

    def ours(self, pid: int) -> bool:
        """A process started for this stack (its environment names this stack's Redis)."""
        if self.redis_server is None:
            return False
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False
        urls = {self.redis_server.url, self.tier_redis_url or self.redis_server.url}
        return any(f"REDIS_URL={url}".encode() in environ for url in urls)

    def _session_ids(self) -> list[str]:
        if self.client is None or self.redis_server is None or self.redis_server.process is None:
            return []
        if self.redis_server.process.poll() is not None:
            return []
        try:
            return list(self.client.zrange("wt:sessions", 0, -1))  # type: ignore[arg-type]
        except redis.RedisError:
            return []

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log()}" for p in self.procs)

    # HTTP

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def http(
        self,
        method: str,
        path: str,
        body: Any = None,
        timeout: float = 10.0,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        headers = {"content-type": "application/json", "authorization": f"Bearer {TOKEN}", **(headers or {})}
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return Answer(response.status, json.loads(response.read()), _lower(response.headers))
        except urllib.error.HTTPError as error:
            return Answer(error.code, json.loads(error.read() or b"{}"), _lower(error.headers))
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return Answer(0, {}, {})

    def ready(self) -> int:
        return self.http("GET", "/readyz", timeout=3).status

    def new_workspace(self, name: str) -> Path:
        """A workspace of its own (like `workspace`) for one session of a stack many tests share."""
        folder = self.tmp / name
        folder.mkdir()
        (folder / "README.md").write_text((self.workspace / "README.md").read_text())
        return folder

    def dispatch(
        self,
        context: dict[str, Any] | None = None,
        workflow_id: str = WORKFLOW_ID,
        workspace: Path | None = None,
    ) -> str:
        folder = workspace or self.workspace
        body: dict[str, Any] = {"workflowId": workflow_id, "goal": "g", "workspacePath": str(folder)}
        if context:
            body["context"] = context
        # as a coordinator does (README, WORKTRAIN_REDIS_WAIT_REPLICAS): with it set, a dispatch no
        # replica confirmed in time is a 503 `not_replicated`, retried after Retry-After with
        # the same Idempotency-Key (a CI run met one with a 500 ms WAIT on a loaded host)
        key = {"Idempotency-Key": f"harness-{uuid.uuid4().hex}"}
        deadline = time.monotonic() + 30
        while True:
            answer = self.http("POST", "/api/v2/auto/dispatch", body, headers=key)
            if answer.body.get("code") != "not_replicated" or time.monotonic() > deadline:
                break
            time.sleep(float(answer.headers.get("retry-after", "1")))
        assert answer.status == 202, answer
        return str(answer.body["data"]["sessionId"])

    def steer(self, sid: str, text: str, client_msg_id: str | None = None) -> Answer:
        body: dict[str, Any] = {"text": text}
        if client_msg_id:
            body["clientMsgId"] = client_msg_id
        return self.http("POST", f"/api/v2/sessions/{sid}/steer", body)

    # Redis, read directly

    def record(self, sid: str) -> dict[str, str]:
        assert self.client is not None
        return self.client.hgetall(f"wt:session:{{{sid}}}")  # type: ignore[return-value]

    def redis_bytes(self) -> redis.Redis:
        """A decode_responses=False client (what RQ's own calls need)."""
        assert self.redis_server is not None
        return redis.Redis.from_url(self.redis_server.url)

    def events(self, sid: str) -> list[dict[str, Any]]:
        assert self.client is not None
        entries: Any = self.client.xrange(f"wt:session:{{{sid}}}:events")
        return [json.loads(fields["data"]) for _, fields in entries]

    def events_of(self, sid: str, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events(sid) if e["kind"] == kind]

    def journal(self, sid: str) -> list[dict[str, str]]:
        assert self.client is not None
        entries: Any = self.client.xrange(f"wt:session:{{{sid}}}:steers")
        return [fields for _, fields in entries]

    def wait_finished(self, sid: str, timeout: float = 60.0) -> dict[str, str]:
        def finished() -> dict[str, str] | None:
            record = self.record(sid)
            return record if record.get("status") in ("completed", "failed", "cancelled") else None

        try:
            record: dict[str, str] = wait_until(finished, f"session {sid} to finish", timeout, every=0.05)
        except TimeoutError:
            raise AssertionError(f"{sid} did not finish: {self.record(sid)}\n{self.logs()}") from None
        # the worker appends session_completed right after it marks the session ended (its
        # steer_undelivered needs the offsets the finish drained): wait for it too, a while
        try:
            wait_until(lambda: self.events_of(sid, "session_completed"), "session_completed", 5, every=0.05)
        except TimeoutError:
            print(f"{sid} ended without session_completed in its stream")  # a test may mean that
        return record


StackT = TypeVar("StackT", bound=Stack)


def stacks(tmp: Path, kind: type[StackT]) -> Iterator[Callable[..., StackT]]:
    """A pytest fixture's body: a factory of stacks under `tmp`, each closed (every process it
    started killed) when the test ends."""
    made: list[StackT] = []

    def make(**options: Any) -> StackT:
        stack = kind(tmp / f"stack{len(made) + 1}", **options)
        made.append(stack)
        return stack

    yield make
    for stack in made:
        stack.close()
