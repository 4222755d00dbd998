"""A lossy network between every tier and Redis (docs/durability.md "Ambiguous failures").

tests/crash/lossyproxy.py sits between `worktrain web`, `worktrain worker` (RQ, the reaper,
the sessions, their heartbeats) and Redis, and drops a few percent of the requests before
Redis sees them and of the replies after Redis ran the command, resetting the connection
each time. Several sessions run through it, each woken from its idle wait by coordinator
steers (retried with the same clientMsgId on 503 or no answer); dispatches are retried
with the same Idempotency-Key. Meanwhile a worker tier at a time is frozen (SIGSTOP) past
its lease and thawed, so that sessions are taken over and their old attempts fenced while
the network loses traffic. Then: every session completes, each accepted steer is in its
session's transcript exactly once and in order, no session exists twice, and the web tier
never answered 500.

The default run is short (WORKTRAIN_LOSSY_SECONDS, default 8 s of steering, one random
seed, printed). The long runs are marked `chaos` and skipped unless WORKTRAIN_CHAOS=1:

    WORKTRAIN_CHAOS=1 WORKTRAIN_TEST_PROCESSES=0 \
        ./scripts/test tests/crash/test_lossy_network.py -m chaos -s -q

runs ten seeds (1-10) of a minute each; WORKTRAIN_LOSSY_SEED=<seed> replays one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.fakemodel import reply, text, tool
from tests.crash.coordinator import Coordinator, Verdict, verify
from tests.crash.harness import NOTES, WORKFLOW_ID, SessionModel, Stack
from tests.crash.lossyproxy import LossyProxy

pytestmark = pytest.mark.e2e

SESSIONS = 5
# Seconds between two steers to one session: at least this often, and so that no session
# gets more than MAX_STEERS (each steer is up to two turns; the workflow allows 200).
STEER_EVERY = 0.3
MAX_STEERS = 60
LEASE = 2.0
PAUSE_EVERY = 15.0  # seconds between two freezes of a worker tier (the first after 2 s)
CHAOS_SECONDS = 60.0
CHAOS_SEEDS = range(1, 11)


class SteeredModel(SessionModel):
    """An agent that works only when steered: a steer in the newest user message makes it
    read a file (one tool turn), after which it waits idle again; once a `[finish]` steer is
    in its transcript it works through the rest of the workflow."""

    def rule(self, request: ModelRequest) -> ModelReply:
        time.sleep(self.latency)
        users = [m for m in request.messages if m.role == "user"]
        if any("[finish]" in t for m in users for t in m.texts):
            return reply(text("Finishing."), tool("continue_workflow", notes=NOTES))
        if users and any("[steer" in t for t in users[-1].texts):
            return reply(text("On it."), tool("Read", path="README.md"))
        return reply(text("Waiting for the coordinator."))


class Dispatcher:
    """Dispatch, retried with the same Idempotency-Key until it gets its 202."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.answers: Counter[str] = Counter()

    def dispatch(self, key: str) -> str:
        body = {"workflowId": WORKFLOW_ID, "goal": "g", "workspacePath": str(self.stack.workspace)}
        while True:
            answer = self.stack.http("POST", "/api/v2/auto/dispatch", body, headers={"Idempotency-Key": key})
            if answer.status == 202:
                self.answers["duplicate" if answer.body["data"].get("duplicate") else "created"] += 1
                return str(answer.body["data"]["sessionId"])
            assert answer.status in (0, 503), f"dispatch answered {answer}"
            self.answers[str(answer.status)] += 1
            time.sleep(0.1)


def steer_all(coordinator: Coordinator, sessions: list[str], seconds: float) -> None:
    every = max(STEER_EVERY, seconds / MAX_STEERS)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.monotonic()
        for sid in sessions:
            coordinator.steer_once(sid)
        time.sleep(max(every - (time.monotonic() - started), 0.01))
    for sid in sessions:  # the last steer to each: work through the workflow and finish
        coordinator.post(sid, f"[finish] {sid[-8:]}", f"finish-{sid}")


def pause_tiers(stack: Stack, stopped: threading.Event, pauses: list[float]) -> None:
    """Freeze worker1, then worker2, ... each for a lease and a half, every PAUSE_EVERY."""
    n = 0
    while not stopped.wait(2.0 if n == 0 else PAUSE_EVERY):
        worker = stack.proc(f"worker{n % 2 + 1}")
        frozen = stack.freeze_tier(worker)
        stopped.wait(LEASE * 1.5)
        stack.thaw_tier(worker, frozen)
        pauses.append(LEASE * 1.5)
        n += 1


def run_lossy(make_stack: Callable[..., Stack], seed: int, seconds: float) -> str:
    stack = make_stack(lease_seconds=LEASE, idle_wait_seconds=60, model=SteeredModel())
    stack.start_backends()
    assert stack.redis_server is not None and stack.client is not None
    proxy = LossyProxy(stack.redis_server.port, seed).start()
    try:
        stack.tier_redis_url = proxy.url
        stack.start_tiers(workers=2, processes=4)
        proxy.lossy = True
        started = time.monotonic()
        dispatcher = Dispatcher(stack)
        sessions = [dispatcher.dispatch(f"lossy-{seed}-{i}") for i in range(SESSIONS)]
        # every dispatch sent again, as a client whose answer was lost does: the same session
        assert [dispatcher.dispatch(f"lossy-{seed}-{i}") for i in range(SESSIONS)] == sessions
        coordinator = Coordinator(stack)
        steering = threading.Thread(target=steer_all, args=(coordinator, sessions, seconds), daemon=True)
        done, pauses = threading.Event(), []
        pausing = threading.Thread(target=pause_tiers, args=(stack, done, pauses), daemon=True)
        steering.start()
        pausing.start()
        steering.join(seconds + 120)
        done.set()
        pausing.join(LEASE * 2)
        assert not steering.is_alive(), "the coordinator could not get its steers accepted"
        for sid in sessions:
            stack.wait_finished(sid, timeout=max(seconds, 60) + 120 - (time.monotonic() - started))
        proxy.lossy = False
        line = report(stack, proxy, seed, sessions, coordinator, dispatcher, time.monotonic() - started)
        print(f"  worker tiers frozen {len(pauses)} times for {LEASE * 1.5:.0f}s each")
        return line
    finally:
        proxy.close()


def report(
    stack: Stack,
    proxy: LossyProxy,
    seed: int,
    sessions: list[str],
    coordinator: Coordinator,
    dispatcher: Dispatcher,
    elapsed: float,
) -> str:
    assert stack.client is not None
    total, attempts = Verdict(), []
    for sid in sessions:
        record = stack.record(sid)
        outcome = (record["status"], record["outcome"])
        assert outcome == ("completed", "workflow_complete"), (record, stack.logs())
        total.add(verify(stack, sid, coordinator.accepted[sid]))
        attempts.append(int(record["attempt"]))
    assert len(set(sessions)) == SESSIONS and stack.client.zcard("wt:sessions") == SESSIONS
    assert dispatcher.answers["duplicate"] >= SESSIONS
    assert "Internal error" not in stack.proc("web").log() and "internal_error" not in stack.proc("web").log()
    accepted = sum(len(steers) for steers in coordinator.accepted.values())
    line = (
        f"seed={seed} seconds={elapsed:.0f} sessions={SESSIONS} completed={SESSIONS} "
        f"steers={accepted} lost={total.lost} duplicated={total.duplicated} "
        f"undelivered={total.undelivered} disordered={total.disordered} "
        f"attempts={sum(attempts)} "
        f"steer_retries={len(coordinator.unavailable)}x503+{coordinator.no_answer}x0 "
        f"steer_duplicates={coordinator.statuses.count('duplicate')} "
        f"dispatch={json.dumps(dict(dispatcher.answers))} {proxy.stats.line()}"
    )
    print(line)
    assert (total.lost, total.duplicated, total.undelivered, total.disordered) == (0, 0, 0, 0), total.problems
    dropped = (proxy.stats.requests_dropped, proxy.stats.replies_dropped)
    assert min(dropped) > 0, "no loss: the test tested nothing"
    return line


def test_lossy_network(make_stack: Callable[..., Stack]) -> None:
    seed = int(os.environ.get("WORKTRAIN_LOSSY_SEED") or time.time_ns() % 1_000_000)
    print(f"seed={seed} (WORKTRAIN_LOSSY_SEED={seed} replays it)")
    run_lossy(make_stack, seed, float(os.environ.get("WORKTRAIN_LOSSY_SECONDS") or 8))


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("seed", CHAOS_SEEDS)
def test_lossy_network_for_a_minute(make_stack: Callable[..., Stack], seed: int) -> None:
    run_lossy(make_stack, seed, float(os.environ.get("WORKTRAIN_LOSSY_SECONDS") or CHAOS_SECONDS))
