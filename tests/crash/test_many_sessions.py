"""Many sessions in one worker process (`worktrain worker --concurrency C`, README's worktrain command).

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

import pytest
from rq.job import Job
from rq.registry import StartedJobRegistry
from rq.worker import Worker

from daemon.bus.jobspec import job_queue
from tests.crash.coordinator import Coordinator, Verdict, verify
from tests.crash.harness import WORKFLOW, Stack, descendants, pid_of_worker, wait_until

pytestmark = pytest.mark.e2e

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
    assert stack.client is not None  # one interrupt listener for the process, not one per session
    assert stack.client.pubsub_numsub("wt:interrupts") == [("wt:interrupts", 1)]
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


def test_a_session_that_raises_or_stalls_ends_alone(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(lease_seconds=LEASE, faults=True, concurrency=8)
    stalling = {**WORKFLOW, "id": "stalls", "limits": {"stallSeconds": 1}}
    (stack.tmp / "workflows" / "stalls.json").write_text(json.dumps(stalling))
    stack.start_backends()
    stack.extra_env["WORKTRAIN_MODEL_RETRY_SECONDS"] = "2"  # a stalled call is retried 2 s, then given up
    stack.start_tiers(workers=1)
    stack.model.latency = 0.3
    raising = stack.dispatch({"worktrainFault": {"point": "in_tool", "occurrence": 2, "kill": "raise"}})
    stalled = stack.dispatch(workflow_id="stalls")
    stack.model.hold_when = lambda sid, n: sid == stalled and n >= 2  # its model stops answering
    others = [stack.dispatch() for _ in range(5)]
    coordinator = Coordinator(stack, every=0.3)
    coordinator.sessions = [raising, stalled, *others]
    coordinator.start()
    records = finish_all(stack, [raising, stalled, *others])
    coordinator.stop()
    ends = {sid: (r["status"], r["outcome"]) for sid, r in records.items()}
    assert ends[raising] == ("failed", "error"), records[raising]
    assert "InjectedFault" in records[raising]["outcomeDetail"]
    assert ends[stalled] == ("failed", "stalled"), records[stalled]
    for sid in others:
        assert records[sid]["outcome"] == "workflow_complete", records[sid]
        assert records[sid]["attempt"] == "1"  # nobody else was disturbed: no resume
    assert len({pid_of_worker(r["worker"]) for r in records.values()}) == 1  # all in one process
    rq = stack.redis_bytes()
    assert Job.fetch(raising, connection=rq).get_status() == "failed"  # RQ saw the job raise
    assert {Job.fetch(sid, connection=rq).get_status() for sid in [stalled, *others]} == {"finished"}
    exactly_once(stack, others, coordinator)
    assert stack.proc("worker1").process.poll() is None  # the process lives on


def six_held_sessions(stack: Stack) -> tuple[list[str], Coordinator]:
    """Six sessions on worker1, each in a held turn-2 model call, steered all along."""
    stack.model.hold_when = lambda sid, n: n == 2
    sids = [stack.dispatch() for _ in range(6)]
    coordinator = Coordinator(stack, every=0.3)
    coordinator.sessions = sids
    coordinator.start()
    wait_until(lambda: held_count(stack, sids) == 6, "6 sessions in a held model call", 60)
    return sids, coordinator


def test_sigterm_hands_every_session_over_to_another_worker(make_stack: Callable[..., Stack]) -> None:
    lease = 10.0  # long: a resume before it lapses can only be a hand-over
    stack = make_stack(lease_seconds=lease, concurrency=10).start(workers=1)
    sids, coordinator = six_held_sessions(stack)
    first = stack.proc("worker1")
    stack.start_worker("worker2")
    first.process.send_signal(signal.SIGTERM)  # to the pool's parent, as `docker stop` does
    wait_until(lambda: "warm shutdown: stopping 6 session(s)" in first.log(), "the sessions to be told")
    released_at = time.monotonic()
    for sid in sids:
        stack.model.release(sid)
    wait_until(lambda: all(stack.record(s).get("attempt") == "2" for s in sids), "every hand-over", lease)
    print(f"6 sessions handed over within {time.monotonic() - released_at:.1f}s (lease {lease:.0f}s)")
    assert first.process.wait(20) == 0, first.log()  # the stopped worker exits by itself
    records = finish_all(stack, sids)
    coordinator.stop()
    second = stack.proc("worker2")
    for sid, record in records.items():
        assert record["outcome"] == "workflow_complete", record
        assert pid_of_worker(record["worker"]) in {second.pid, *descendants(second.pid)}, record
        kinds = [e["kind"] for e in stack.events(sid)]
        assert "session_resumed" in kinds and kinds[-1] == "session_completed"
    exactly_once(stack, sids, coordinator)


def test_kill_9_of_the_process_resumes_every_session_elsewhere(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(lease_seconds=LEASE, concurrency=10).start(workers=1)
    sids, coordinator = six_held_sessions(stack)
    stack.start_worker("worker2")
    stack.proc("worker1").kill_tree(signal.SIGKILL)
    killed_at = time.monotonic()
    for sid in sids:
        stack.model.release(sid)  # the dead process's calls return to nobody
    wait_until(lambda: all(stack.record(s).get("attempt") == "2" for s in sids), "every resume", LEASE + 15)
    print(f"6 sessions resumed {time.monotonic() - killed_at:.1f}s after kill -9 (lease {LEASE:.0f}s)")
    records = finish_all(stack, sids)
    coordinator.stop()
    assert all(r["outcome"] == "workflow_complete" for r in records.values()), records
    exactly_once(stack, sids, coordinator)
    assert sum(len(coordinator.accepted.get(sid, {})) for sid in sids) >= 12
