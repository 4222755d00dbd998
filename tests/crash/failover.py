"""The failover harness (issue 41): a Sentinel cluster under steering and dispatching, one
fault, judged by ground truth.

The cluster (tests/crash/sentinels.py): a primary behind tests/crash/lossyproxy.py, two
replicas and three sentinels on loopback. `worktrain web` and two `worktrain worker` tiers
reach Redis only through `REDIS_URL=redis+sentinel://...`. A coordinator steers SESSIONS
sessions every 0.3 s each (each steer retried with its clientMsgId on 503, 500 or no
answer), and a dispatcher dispatches a session every DISPATCH_EVERY seconds (retried with
its Idempotency-Key). After STEER_BEFORE seconds, one fault:

- `stall`: DEBUG SLEEP on the primary, past the web tier's read timeout;
- `sentinel-failover`: SENTINEL FAILOVER;
- `kill-primary`: kill -9 of the primary, restarted (as a supervisor would) once another
  was promoted, to come back as a replica;
- `partition`: the primary cut from its replicas and sentinels (a silent blackhole), not
  from web and workers, until a replica was promoted and SPLIT_SECONDS more, then healed.

Then STEER_AFTER seconds more, a `[finish]` steer to every session, and the verdict from
what the fake model received (tests/crash/coordinator.py `verify`): every steer answered
200 once in the transcript, every dispatch answered 202 still there and finished. The
figures (`Figures.line`) are what docs/durability.md's table reports.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis

from daemon.host.embedded_redis import RedisServer, free_port
from daemon.host.redisconn import connect
from tests.crash.coordinator import Coordinator, Verdict, verify
from tests.crash.harness import WORKFLOW_ID, Answer, Stack, user_texts
from tests.crash.lossyproxy import LossyProxy
from tests.crash.sentinels import CLUSTER_HOSTS, Sentinels, debug_args, primary_args
from tests.crash.test_lossy_network import SteeredModel

SESSIONS = 6
LEASE = 6.0
STEER_BEFORE = 4.0
STEER_AFTER = 6.0
DISPATCH_EVERY = 1.0
STALL_SECONDS = 4.0  # past the web tier's 3 s read timeout (web/serve.py WEB_SOCKET_TIMEOUT)
SPLIT_SECONDS = 5.0  # how long the cut-off primary stays reachable by its clients after a promotion
WAIT_MS = 500


@dataclass
class Figures:
    scenario: str
    wait: int
    answered: int = 0  # steers answered 200
    lost: int = 0
    duplicated: int = 0
    http_500: int = 0
    http_503: int = 0
    no_answer: int = 0
    wrong_replies: int = 0  # a 200 naming another steer's clientMsgId
    first_success: float = 0.0  # seconds from the fault to the first 200 of a steer sent after it
    longest_gap: float = 0.0  # the longest time without a 200 after the fault
    dispatched: int = 0  # dispatches answered 202 during the run
    wiped: int = 0  # ... whose session is gone
    unfinished: int = 0  # sessions that did not finish after their [finish] steer
    left: int = 0  # attempts that left their session ("Redis failed; leaving the session")
    fault_seconds: float = 0.0  # until the new primary answered (the stall's length)
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        return (
            f"scenario={self.scenario} wait_replicas={self.wait} answered_200={self.answered} "
            f"lost={self.lost} duplicated={self.duplicated} 500={self.http_500} 503={self.http_503} "
            f"no_answer={self.no_answer} "
            f"wrong_replies={self.wrong_replies} first_success_after_fault={self.first_success:.1f}s "
            f"longest_gap={self.longest_gap:.1f}s "
            f"dispatched_202={self.dispatched} dispatches_wiped={self.wiped} unfinished={self.unfinished} "
            f"attempts_left={self.left} fault={self.fault_seconds:.1f}s"
        )


@dataclass
class FailoverCoordinator(Coordinator):
    """The coordinator of tests/crash/coordinator.py, which also counts what a broken tier
    answers (500, a 200 for another steer) instead of stopping at it, and offsets handed out
    twice (an accept a failover wiped, its offset given to a later steer)."""

    reused: int = 0
    lost_texts: list[str] = field(default_factory=list)
    http: Counter[int] = field(default_factory=Counter)
    wrong: int = 0
    successes: list[tuple[float, float]] = field(default_factory=list)  # each 200: sent, answered
    reuses: list[str] = field(default_factory=list)

    def post(self, sid: str, text: str, client_msg_id: str) -> Answer:
        while True:
            sent = time.monotonic()
            answer = self.stack.steer(sid, text, client_msg_id)
            self.http[answer.status] += 1
            if answer.status == 200:
                steer = answer.body.get("steer") or {}
                if steer.get("clientMsgId") != client_msg_id:
                    self.wrong += 1  # an answer read out of step
                    time.sleep(0.1)
                    continue
                self.successes.append((sent, time.monotonic()))
                self._ledger(sid, int(steer["offset"]), text)
                self.statuses.append(answer.body["status"])
                return answer
            if answer.status == 404:
                self.statuses.append("not_found")
                return answer
            if answer.status == 503:
                self.unavailable.append(answer)
            elif answer.status == 0:
                self.no_answer += 1
            time.sleep(0.1)

    def _ledger(self, sid: str, offset: int, text: str) -> None:
        with self._lock:
            known = self.accepted.setdefault(sid, {}).setdefault(offset, text)
            if known != text:
                self.reused += 1
                self.accepted[sid][offset] = text  # the journal's now; the earlier one is lost
                self.lost_texts.append(known)
                self.reuses.append(f"{sid} offset {offset}: {known!r} answered 200, then {text!r} got it")


class Dispatcher:
    """Dispatches a session every DISPATCH_EVERY seconds, each retried with its
    Idempotency-Key until it gets its 202 (or the run ends)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.created: list[str] = []
        self.http: Counter[int] = Counter()
        self.stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dispatcher", daemon=True)

    def start(self) -> Dispatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self._thread.join(60)

    def _run(self) -> None:
        while not self.stopped.wait(DISPATCH_EVERY):
            self._dispatch(f"failover-{uuid.uuid4().hex}")

    def _dispatch(self, key: str) -> None:
        body = {"workflowId": WORKFLOW_ID, "goal": "g", "workspacePath": str(self.stack.workspace)}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            answer = self.stack.http("POST", "/api/v2/auto/dispatch", body, headers={"Idempotency-Key": key})
            self.http[answer.status] += 1
            if answer.status == 202:
                self.created.append(str(answer.body["data"]["sessionId"]))
                return
            time.sleep(0.2)


@dataclass
class Run:
    stack: Stack
    cluster: Sentinels
    proxy: LossyProxy
    wait: int

    @classmethod
    def start(cls, make_stack: Callable[..., Stack], wait: int, down_after_ms: int, lease: float) -> Run:
        stack = make_stack(lease_seconds=lease, idle_wait_seconds=60, model=SteeredModel(), concurrency=4)
        stack.extra_env = {
            "WORKTRAIN_REDIS_WAIT_REPLICAS": str(wait),
            "WORKTRAIN_REDIS_WAIT_MS": str(WAIT_MS),
        }
        port = free_port()
        proxy = LossyProxy(port, seed=0).start()
        stack.redis_args = (*primary_args(proxy), *debug_args())
        stack.start_backends(redis_port=port)
        assert stack.redis_server is not None
        (stack.tmp / "sentinels").mkdir()
        cluster = Sentinels(stack.tmp / "sentinels", stack.redis_server, proxy, down_after_ms=down_after_ms)
        cluster.start()
        stack.tier_redis_url = cluster.url
        stack.client = connect(cluster.url, patience_seconds=30)  # the test's reads follow the primary too
        stack.start_tiers(workers=2, processes=1)
        return cls(stack, cluster, proxy, wait)

    def stop(self) -> None:
        with contextlib.suppress(redis.RedisError, TypeError, ValueError):  # teardown reads directly
            self.stack.client = self.cluster.direct()
        self.cluster.stop()
        self.proxy.close()


# --- the faults: each returns how long until the cluster had a writable primary again --------


def stall(run: Run) -> float:
    assert run.stack.redis_server is not None
    direct = run.stack.redis_server.client(socket_timeout=STALL_SECONDS + 5)
    started = time.monotonic()
    direct.execute_command("DEBUG", "SLEEP", STALL_SECONDS)
    return time.monotonic() - started


def sentinel_failover(run: Run) -> float:
    run.cluster.failover()
    return run.cluster.wait_primary()


def kill_primary(run: Run) -> float:
    old = run.stack.redis_server
    assert old is not None
    old.kill()
    took = run.cluster.wait_primary()
    restarted = RedisServer(old.data_dir, port=old.port, extra_args=old.extra_args)  # its AOF
    restarted.start()  # the sentinels make it a replica
    run.stack.redis_server = restarted
    return took


def partition(run: Run) -> float:
    run.proxy.partition("blackhole", only=CLUSTER_HOSTS)
    took = run.cluster.wait_primary()
    time.sleep(SPLIT_SECONDS)  # the old primary, cut off, still reachable by web and workers
    run.proxy.heal()
    return took


FAULTS: dict[str, Callable[[Run], float]] = {
    "stall": stall,
    "sentinel-failover": sentinel_failover,
    "kill-primary": kill_primary,
    "partition": partition,
}


def run_scenario(
    make_stack: Callable[..., Stack], scenario: str, wait: int, finish_timeout: float = 120
) -> Figures:
    """One run: load, the fault, load, then the verdict's figures (not asserted here)."""
    stalled = scenario == "stall"
    run = Run.start(
        make_stack, wait, down_after_ms=15000 if stalled else 1000, lease=15.0 if stalled else LEASE
    )
    stack = run.stack
    try:
        sessions = [stack.dispatch() for _ in range(SESSIONS)]
        coordinator = FailoverCoordinator(stack, every=0.3)
        coordinator.sessions = sessions
        dispatcher = Dispatcher(stack)
        coordinator.start()
        dispatcher.start()
        time.sleep(STEER_BEFORE)
        fault_at = time.monotonic()
        figures = Figures(scenario, wait, fault_seconds=FAULTS[scenario](run))
        time.sleep(STEER_AFTER)
        coordinator.stop()
        dispatcher.stop()
        after = sorted(answered - fault_at for sent, answered in coordinator.successes if sent >= fault_at)
        figures.first_success = after[0] if after else float("inf")
        figures.longest_gap = max((b - a for a, b in zip([0.0, *after], after, strict=False)), default=0.0)
        judge(run, coordinator, dispatcher, sessions, figures, finish_timeout)
        return figures
    finally:
        run.stop()


def judge(
    run: Run,
    coordinator: FailoverCoordinator,
    dispatcher: Dispatcher,
    sessions: list[str],
    figures: Figures,
    finish_timeout: float,
) -> None:
    stack = run.stack
    everyone = [*sessions, *dispatcher.created]
    for sid in everyone:
        coordinator.post(sid, f"[finish] {sid[-8:]}", f"finish-{sid}")
    total = Verdict()
    for sid in everyone:
        if not stack.record(sid):  # a dispatch answered 202, then wiped with its steers
            figures.wiped += 1
            total.lost += len(coordinator.accepted.get(sid, {}))
            continue
        try:
            record = stack.wait_finished(sid, timeout=finish_timeout)
        except AssertionError:
            figures.unfinished += 1
            figures.problems.append(f"{sid} did not finish: {stack.record(sid)}")
            continue
        if (record["status"], record["outcome"]) != ("completed", "workflow_complete"):
            figures.problems.append(f"{sid} ended {record['status']} {record['outcome']}")
        total.add(verify(stack, sid, coordinator.accepted.get(sid, {})))
    total.lost += coordinator.reused  # answered 200, then wiped: their offsets went to others
    total.duplicated += sum(  # a wiped steer the model had received before the failover
        1
        for text in coordinator.lost_texts
        for sid in everyone
        if any(text in user_texts(r) for r in stack.model.requests_of(sid))
    )
    http = coordinator.http + dispatcher.http
    figures.answered = sum(len(s) for s in coordinator.accepted.values())
    figures.lost, figures.duplicated = total.lost, total.duplicated + total.disordered
    figures.http_500 = sum(n for status, n in http.items() if status >= 500 and status != 503)
    figures.http_503, figures.no_answer = http[503], http[0]
    figures.wrong_replies = coordinator.wrong
    figures.dispatched = len(dispatcher.created)
    figures.left = sum(p.log(10**7).count("leaving the session to be resumed") for p in stack.procs)
    figures.problems.extend(total.problems + coordinator.reuses)
    for sid in {p.split(" ", 1)[0] for p in figures.problems if p.startswith("sess_")}:
        dump = stack.tmp / f"requests-{sid}.txt"  # what the model received, for the post-mortem
        dump.write_text("\n\n=====\n\n".join(user_texts(r) for r in stack.model.requests_of(sid)))
    exited = [p.name for p in stack.procs if p.process.poll() is not None]
    if exited:
        figures.problems.append(f"tier processes exited: {exited}")
    if "internal_error" in stack.proc("web").log(10**7):
        figures.problems.append("the web tier logged an internal_error")
