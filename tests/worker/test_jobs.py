"""The RQ job and the worker command against real Redis and the fake model over HTTP."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import pytest

from daemon.agent.model import ModelRequest
from daemon.bus.jobspec import job_queue
from daemon.bus.session.steerbus import ClaimRefused
from daemon.fakemodel import reply, text, tool
from daemon.schema.records import SessionStatus
from tests.worker.conftest import WorkerEnv
from worker.jobs import run_session

pytestmark = pytest.mark.processes

NOTES = "Looked at the workspace README and the files next to it; moving on now."


def wait_for(predicate: Any, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def test_the_job_runs_a_session_to_completion_through_the_sdk(worker_env: WorkerEnv) -> None:
    sid = worker_env.dispatch()
    assert run_session(sid) == "workflow_complete"
    record = worker_env.registry.get(sid)
    assert record is not None and (record.status, record.turnCount) == (SessionStatus.COMPLETED, 2)
    assert len(worker_env.model.requests) == 2
    assert worker_env.model.requests[0]["model"] == "claude-fake"
    # report_issue landed in both sinks
    [(_, fields)] = worker_env.client.xrange("wt:issues")  # type: ignore[misc]
    assert fields["sessionId"] == sid and fields["severity"] == "info"
    lines = (worker_env.data_dir / "issues" / f"{sid}.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in lines] == ["self_correction"]
    # events: the session stream and the daily JSONL mirror
    kinds = [
        json.loads(f["data"])["kind"] for _, f in worker_env.client.xrange(f"wt:session:{{{sid}}}:events")
    ]  # type: ignore[misc]
    assert kinds[0] == "session_started" and kinds[-1] == "session_completed"
    assert "llm_turn_completed" in kinds and "issue_reported" in kinds
    [mirror] = (worker_env.data_dir / "events").glob("*.jsonl")
    assert sum(1 for line in mirror.read_text().splitlines() if sid in line) == len(kinds)


def test_a_missing_workspace_fails_the_session_without_a_model_call(worker_env: WorkerEnv) -> None:
    sid = worker_env.dispatch(workspace=worker_env.workspace / "gone")
    assert run_session(sid) == "workspace_not_found"
    record = worker_env.registry.get(sid)
    assert record is not None and (record.status, record.outcome) == (
        SessionStatus.FAILED,
        "workspace_not_found",
    )
    assert worker_env.model.requests == []


def test_the_lease_outlives_a_long_model_call_and_a_second_job_leaves_it_alone(
    worker_env: WorkerEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKTRAIN_LEASE_SECONDS", "0.6")
    sid = worker_env.dispatch()
    worker_env.model.hold()
    outcome: list[str] = []
    job = threading.Thread(target=lambda: outcome.append(run_session(sid)))
    job.start()
    try:
        worker_env.model.wait_for_requests(1)
        time.sleep(2.0)  # three leases long: only the heartbeat thread keeps it
        holder = worker_env.client.get(f"wt:session:{{{sid}}}:lease")
        assert holder is not None and not holder.startswith("reaper:")
        with pytest.raises(ClaimRefused):
            worker_env.bus.channel(sid, "intruder", 0.6).claim()
        assert run_session(sid) == "skipped"  # a second job for the session
    finally:
        worker_env.model.release()
        job.join(30)
    assert outcome == ["workflow_complete"]


def test_sigterm_stops_at_the_turn_boundary_and_enqueues_a_resume_job(worker_env: WorkerEnv) -> None:
    sid = worker_env.dispatch()

    def terminated_during_the_call(request: ModelRequest) -> Any:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler run_session installed takes it
        return reply(text("Working."), tool("continue_workflow", notes=NOTES))

    worker_env.model.script.extend([terminated_during_the_call])
    previous = signal.getsignal(signal.SIGTERM)
    assert run_session(sid) == "released"
    assert signal.getsignal(signal.SIGTERM) == previous  # restored
    record = worker_env.registry.get(sid)
    # the stop cut the live turn (issue 33): the call's reply is abandoned, not applied, so
    # the step is where it was and the resume asks again
    assert record is not None and (record.status, record.stepIndex, record.turnCount) == (
        SessionStatus.RUNNING,
        0,
        1,
    )
    assert worker_env.client.get(f"wt:session:{{{sid}}}:lease").startswith("reaper:")  # type: ignore[union-attr]
    assert job_queue(worker_env.rq_client).job_ids == [f"{sid}-r2"]
    # the resume job (run here directly) carries on from the checkpoint
    assert run_session(sid) == "workflow_complete"
    assert worker_env.registry.get(sid).attempt == 2  # type: ignore[union-attr]


def test_worker_command_runs_queued_jobs(worker_env: WorkerEnv) -> None:
    sessions = [worker_env.dispatch() for _ in range(2)]
    for sid in sessions:
        worker_env.enqueue(sid)
    process = worker_env.worker_process("--burst", "--processes", "2")
    try:
        assert process.wait(60) == 0, worker_env.worker_log()
    finally:
        if process.poll() is None:
            process.kill()
    for sid in sessions:
        record = worker_env.registry.get(sid)
        assert record is not None and record.status == SessionStatus.COMPLETED, worker_env.worker_log()


def test_sigterm_to_the_worker_hands_the_running_session_over(worker_env: WorkerEnv) -> None:
    sid = worker_env.dispatch()
    worker_env.enqueue(sid)
    worker_env.model.hold()
    process = worker_env.worker_process("--processes", "1")
    try:
        worker_env.model.wait_for_requests(1, timeout=30)
        process.send_signal(signal.SIGTERM)
        # the session has been told, and its live turn cut short at once (issue 33): the held
        # call is abandoned, not waited for
        wait_for(lambda: "cut short" in worker_env.worker_log(), what="SIGTERM")
        worker_env.model.release()
        assert process.wait(30) == 0, worker_env.worker_log()
    finally:
        worker_env.model.release()
        if process.poll() is None:
            process.kill()
            process.wait()
    record = worker_env.registry.get(sid)
    assert record is not None and (record.status, record.stepIndex) == (SessionStatus.RUNNING, 0), (
        worker_env.worker_log()
    )
    assert job_queue(worker_env.rq_client).job_ids == [f"{sid}-r2"]
    finisher = worker_env.worker_process("--burst")
    assert finisher.wait(60) == 0, worker_env.worker_log()
    record = worker_env.registry.get(sid)
    assert record is not None and (record.status, record.attempt) == (SessionStatus.COMPLETED, 2)
    kinds = [
        json.loads(f["data"])["kind"] for _, f in worker_env.client.xrange(f"wt:session:{{{sid}}}:events")
    ]  # type: ignore[misc]
    assert "session_resumed" in kinds


def test_worker_without_redis_says_which_redis_and_hides_the_password() -> None:
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from worker.pool import RedisUnavailable, wait_for_redis

    down = redis.Redis(port=9, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    with pytest.raises(RedisUnavailable) as error:
        wait_for_redis(down, "redis://:hunter2@127.0.0.1:9/0", seconds=0.1)
    assert "127.0.0.1:9" in str(error.value) and "hunter2" not in str(error.value)


def test_the_workers_reaper_resumes_a_session_whose_worker_vanished(worker_env: WorkerEnv) -> None:
    sid = worker_env.dispatch()
    worker_env.bus.channel(sid, "dead-worker", 3).claim()  # it took the session, then died
    worker_env.client.delete(f"wt:session:{{{sid}}}:lease")  # ... and its lease lapsed
    process = worker_env.worker_process("--processes", "1")  # lease 3 s: the reaper looks every 1 s
    try:
        wait_for(
            lambda: (r := worker_env.registry.get(sid)) is not None and r.status == SessionStatus.COMPLETED,
            what="the reaped session to complete",
        )
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
    record = worker_env.registry.get(sid)
    assert record is not None and record.attempt == 2, worker_env.worker_log()
    assert f"enqueued {sid}-r2" in worker_env.worker_log()
