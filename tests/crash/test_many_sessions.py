"""Many sessions in one worker process (`worktrain worker --concurrency C`, SPEC §7).

Real processes: redis-server, `worktrain web`, `worktrain worker` and the fake model.
Each session is still one RQ job shown as started; they run at once; one session's error or
stalled model ends that session alone; SIGTERM hands every running session over to another
worker; `kill -9` of the process loses nothing (each session resumes elsewhere after its
lease) and every steer is delivered exactly once.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable

from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.worker import Worker

from daemon.jobspec import job_queue
from tests.crash.coordinator import Coordinator, Verdict, verify
from tests.crash.harness import STEPS, WORKFLOW, Stack, pid_of_worker, wait_until

LEASE = 2.0


def exactly_once(stack: Stack, sids: list[str], coordinator: Coordinator) -> Verdict:
    verdict = Verdict()
    for sid in sids:
        verdict.add(verify(stack, sid, coordinator.accepted.get(sid, {})))
    assert (verdict.lost, verdict.duplicated, verdict.disordered) == (0, 0, 0), verdict.problems
    return verdict


def finish_all(stack: Stack, sids: list[str], timeout: float = 90.0) -> dict[str, dict[str, str]]:
    return {sid: stack.wait_finished(sid, timeout) for sid in sids}


def held_count(stack: Stack, sids: list[str]) -> int:
    return sum(stack.model.held(sid) for sid in sids)


def started_jobs(stack: Stack) -> set[str]:
    registry = StartedJobRegistry(queue=job_queue(stack.redis_bytes()))
    return set(registry.get_job_ids())


def test_one_process_runs_twenty_sessions_at_once_each_steered_exactly_once(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=3.0, concurrency=20).start(workers=1)
    stack.model.latency = 0.5
    one = stack.dispatch()  # one session alone first: the wall time to compare with
    started = time.monotonic()
    stack.wait_finished(one)
    alone = time.monotonic() - started

    stack.model.hold_when = lambda sid, n: n == 2  # every session's turn 2 waits, all at once
    sids = [stack.dispatch() for _ in range(20)]
    coordinator = Coordinator(stack, every=0.5)
    coordinator.sessions = sids
    coordinator.start()
    wait_until(lambda: held_count(stack, sids) == 20, "20 sessions in a model call at once", 60)
    # RQ's view (`rq info`): one started job per running session, all on the one worker
    assert started_jobs(stack) == set(sids)
    workers = Worker.all(queue=job_queue(stack.redis_bytes()))
    assert len(workers) == 1 and workers[0].get_state() == "busy"
    assert workers[0].current_execution_count == 20
    assert len({pid_of_worker(stack.record(sid)["worker"]) for sid in sids}) == 1  # one process
    started = time.monotonic()
    for sid in sids:
        stack.model.release(sid)
    records = finish_all(stack, sids)
    together = time.monotonic() - started
    coordinator.stop()
    print(f"one session alone {alone:.1f}s; 20 at once, from the release: {together:.1f}s")
    assert stack.model.server.max_in_flight >= 20
    assert all(r["outcome"] == "workflow_complete" for r in records.values()), records
    exactly_once(stack, sids, coordinator)
    assert sum(len(coordinator.accepted.get(sid, {})) for sid in sids) >= 20
    rq = stack.redis_bytes()
    assert {Job.fetch(sid, connection=rq).get_status() for sid in sids} == {"finished"}
    assert started_jobs(stack) == set()
    assert together < alone * 4, "20 sessions took far longer than one: they did not run at once"
