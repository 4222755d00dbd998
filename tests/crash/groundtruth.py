"""What really happened, for the side-effect fencing tests (docs/durability.md), seen from outside.

The system's own journal cannot judge itself, so these tests watch three things it does not
write:

- every model request as the fake model receives it: the attempt that sent it (the send
  gate's `x-worktrain-attempt` header), the sending process (the peer socket's owner, found
  in /proc), and the session record's attempt and worker read from Redis at arrival (a
  request from another process than the record's worker is stale whatever it claims);
- every Bash command the fake model asks for appends `<sessionId> <attempt> <call> <time>` to a
  file in the workspace when it actually runs (the attempt is the one whose request it
  answers; `call` marks the call itself);
- `ClaimWatch` polls the session records every few milliseconds and keeps when each attempt
  was first seen: a request or a Bash run of attempt N after attempt N+1 was seen is stale —
  unless attempt N+1 ran that call itself, taking over attempt N's journaled reply (issue 30):
  its `tool_call_started` for the call follows a `session_resumed` in the stream, where a
  superseded attempt can append nothing (`resumed_call`).

Events are judged in the session's stream: nothing after `session_completed`, and after a
resumed attempt's `session_resumed` (fromTurn F: the turn count when it claimed) no event of a
turn <= F but that attempt's own handed-over receipt.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

from daemon.agent.model import ModelReply, ModelRequest
from daemon.agent.sendguard import ATTEMPT_HEADER
from daemon.fakemodel import reply, text, tool
from tests.crash.harness import NOTES, SessionModel, Stack, session_of


def pid_of_peer(peer: list[Any], server_port: int) -> int:
    """The process owning the client end (127.0.0.1, port) of a TCP connection to the fake
    model's `server_port`, or 0: its socket inode from /proc/net/tcp, then the process
    holding that inode among its fds.

    The whole 4-tuple is matched: Linux reuses an ephemeral port for connections to other
    destinations (a worker's Redis connection may share the model connection's local port),
    and a closed connection lingers in TIME_WAIT with inode 0. An fd that closes while a
    busy worker's fds are read is skipped, not the whole process (which once made a sender
    unfindable in a full run)."""
    _, port = peer
    inode = _inode_of(port, server_port)
    if not inode:
        return 0
    target = f"socket:[{inode}]"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue  # it ended, or is not ours to read
        for fd in fds:
            try:
                if os.readlink(fd) == target:
                    return int(proc.name)
            except OSError:
                continue  # closed since it was listed
    return 0


def _inode_of(local_port: int, remote_port: int) -> str:
    """The live socket (inode not 0) from `local_port` to `remote_port`, or ''."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, inode = fields[1], fields[2], fields[9]
        ends = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
        if ends == (local_port, remote_port) and inode != "0":
            return inode
    return ""


@dataclass
class Arrival:
    sid: str
    attempt: int  # the sender's (header)
    record_attempt: int | None  # the record's at arrival (None: Redis unreachable then)
    pid: int  # the sending process (0: not looked up)
    at: float
    record_pid: int = 0  # the process the record's worker id names at arrival (0: unknown)


class TruthModel(SessionModel):
    """SessionModel whose Bash commands report when and for which attempt they ran, and
    which records every request's sender and the record's attempt at its arrival."""

    def __init__(self, truth: Path | None = None, latency: float = 0.05, bash_sleep: float = 0.1) -> None:
        super().__init__(latency=latency, bash_sleep=bash_sleep)
        self.truth = truth or Path("/nonexistent")  # set to a file in the stack's workspace
        self.arrivals: list[Arrival] = []
        self.redis: redis.Redis | None = None
        self.resolve_pids = False
        self._local = threading.local()
        self.server.on_arrival = self.arrived

    @property
    def server_port(self) -> int:
        port = urlsplit(self.server.url).port
        assert port is not None
        return port

    def arrived(self, body: dict[str, Any]) -> None:
        sid, _, attempt = str(body["_headers"].get(ATTEMPT_HEADER, "/0")).partition("/")
        record_attempt, record_pid = None, 0
        if self.redis is not None:
            try:
                raw, worker = self.redis.hmget(f"wt:session:{{{sid}}}", ["attempt", "worker"])
                record_attempt = int(raw) if raw else None
                record_pid = int(str(worker).rsplit(":", 2)[1]) if worker else 0
            except redis.RedisError:
                record_attempt = None
        pid = pid_of_peer(body["_peer"], self.server_port) if self.resolve_pids else 0
        at = float(body["_at"])
        self.arrivals.append(Arrival(sid, int(attempt or 0), record_attempt, pid, at, record_pid))
        self._local.attempt = int(attempt or 0)

    def rule(self, request: ModelRequest) -> ModelReply:
        super().rule(request)  # its counting, holding and latency; the reply is this one
        sid, attempt = session_of(request.system), getattr(self._local, "attempt", 0)
        # the call's own mark: a later attempt that resumes this reply from the journal runs it
        # under the asking attempt's number (judge tells the two apart by the session's stream)
        call = uuid.uuid4().hex[:12]
        mark = f'echo "{sid} {attempt} {call} $(date +%s.%N)" >> {self.truth}'
        line = f"{mark}; sleep {self.bash_sleep}; echo checked"
        turn = sum(1 for m in request.messages if m.role == "assistant") + 1
        return reply(
            text(f"Turn {turn}: reading, checking, moving on."),
            tool("Read", path="README.md"),
            tool("Bash", command=line),
            tool("continue_workflow", notes=NOTES),
        )

    def bash_runs(self) -> list[tuple[str, int, str, float]]:
        """(session, the attempt that asked for it, the call's mark, when it ran) per run."""
        if not self.truth.exists():
            return []
        runs = []
        for line in self.truth.read_text().splitlines():
            sid, attempt, call, at = line.split()
            runs.append((sid, int(attempt), call, float(at)))
        return runs


@dataclass
class ClaimWatch:
    """Polls the records' `attempt`: when each (session, attempt) was first seen."""

    client: redis.Redis
    sids: list[str] = field(default_factory=list)
    first_seen: dict[tuple[str, int], float] = field(default_factory=dict)
    every: float = 0.005
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ClaimWatch:
        self._thread = threading.Thread(target=self._run, name="claim-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                pipe = self.client.pipeline(transaction=False)
                for sid in list(self.sids):
                    pipe.hget(f"wt:session:{{{sid}}}", "attempt")
                answers = pipe.execute()
            except redis.RedisError:
                continue  # Redis down: nobody can claim meanwhile
            now = time.time()
            for sid, raw in zip(list(self.sids), answers, strict=False):
                if raw:
                    self.first_seen.setdefault((sid, int(raw)), now)

    def superseded_at(self, sid: str, attempt: int) -> float | None:
        """When a later attempt than `attempt` was first seen for `sid` (None: never)."""
        later = [at for (s, a), at in self.first_seen.items() if s == sid and a > attempt]
        return min(later) if later else None


@dataclass
class Verdict:
    stale_requests: list[Arrival] = field(default_factory=list)
    stale_bash: list[tuple[str, int, float]] = field(default_factory=list)
    stale_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    after_completed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    requests: int = 0
    bash_runs: int = 0
    taken_over_bash: int = 0  # run after their asking attempt was superseded, by the next one
    takeovers: int = 0

    @property
    def clean(self) -> bool:
        return not (self.stale_requests or self.stale_bash or self.stale_events or self.after_completed)

    def line(self) -> str:
        return (
            f"requests={self.requests} bash_runs={self.bash_runs} takeovers={self.takeovers} "
            f"taken_over_bash={self.taken_over_bash} "
            f"stale_requests={len(self.stale_requests)} stale_bash={len(self.stale_bash)} "
            f"stale_events={len(self.stale_events)} after_completed={len(self.after_completed)}"
        )


def stale_events(sid: str, events: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    """(events of a superseded attempt, events after session_completed) in one stream."""
    stale, after = [], []
    floor = 0  # turns <= floor belong to superseded attempts
    opening = False
    completed = False
    for event in events:
        kind = event["kind"]
        if completed:
            after.append((sid, event))
            continue
        if kind == "session_completed":
            completed = True
            continue
        if kind == "session_resumed":
            floor, opening = int(event["fromTurn"]), True
            continue
        if kind == "steer_delivered" and opening:
            continue  # the handed-over receipt, emitted by the new attempt
        opening = False
        turn = event.get("turnId")
        if turn is not None and int(turn) <= floor:
            stale.append((sid, event))
    return stale, after


def resumed_call(events: list[dict[str, Any]], call: str) -> bool:
    """Whether a later attempt started the Bash call marked `call`: its tool_call_started
    follows a session_resumed (the superseded attempt can append nothing after the claim
    that precedes it: emit.lua's fence). That attempt took the call over from the journal
    of the reply that asked for it (docs/durability.md): not a stale run."""
    resumed = False
    for event in events:
        resumed = resumed or event["kind"] == "session_resumed"
        if resumed and event["kind"] == "tool_call_started" and call in event.get("inputSummary", ""):
            return True
    return False


def judge(stack: Stack, model: TruthModel, watch: ClaimWatch, sids: Iterable[str]) -> Verdict:
    verdict = Verdict()
    wanted = set(sids)
    events = {sid: stack.events(sid) for sid in wanted}  # each stream read once, after the run
    for arrival in model.arrivals:
        if arrival.sid not in wanted:
            continue
        verdict.requests += 1
        superseded = watch.superseded_at(arrival.sid, arrival.attempt)
        late = superseded is not None and superseded < arrival.at
        # the process that sent it is not the one the record names as running the session
        lost = arrival.pid != 0 and arrival.record_pid != 0 and arrival.pid != arrival.record_pid
        if late or lost or (arrival.record_attempt is not None and arrival.record_attempt > arrival.attempt):
            verdict.stale_requests.append(arrival)
    runs = model.bash_runs()
    times_run = Counter(call for _, _, call, _ in runs)
    for sid, attempt, call, at in runs:
        if sid not in wanted:
            continue
        verdict.bash_runs += 1
        superseded = watch.superseded_at(sid, attempt)
        if superseded is None or superseded >= at:
            continue
        # a call taken over from the journal runs once: never both by the stale attempt and it
        if times_run[call] == 1 and resumed_call(events[sid], call):
            verdict.taken_over_bash += 1
        else:
            verdict.stale_bash.append((sid, attempt, at))
    for sid in wanted:
        stale, after = stale_events(sid, events[sid])
        verdict.stale_events += stale
        verdict.after_completed += after
        verdict.takeovers += sum(1 for s, _ in watch.first_seen if s == sid) - 1
    return verdict
