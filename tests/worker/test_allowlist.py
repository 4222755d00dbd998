"""Workers run WorkTrain's session job and nothing else (issue 10, finding 1): the exploit
was `rq.Queue('worktrain').enqueue('os.system', ...)` from any local process."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rq import Queue
from rq.registry import FailedJobRegistry

from daemon.bus.jobspec import JOB_FUNCTION, JOB_SERIALIZER, job_queue
from daemon.schema.records import SessionStatus
from tests.worker.conftest import WorkerEnv
from worker.allowlist import refusal

pytestmark = pytest.mark.processes

SID = "sess_01JD0000000000000000000000"


class Boom:
    """Unpickling this runs a shell command: what a pickled payload can do to a worker."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def run_burst(worker_env: WorkerEnv) -> None:
    process = worker_env.worker_process("--burst")
    try:
        assert process.wait(60) == 0, worker_env.worker_log()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_foreign_jobs_on_the_queue_are_failed_without_running(worker_env: WorkerEnv, tmp_path: Path) -> None:
    markers = [tmp_path / f"pwned-{i}" for i in range(4)]
    pickled = Queue("worktrain", connection=worker_env.rq_client)  # RQ's default: pickle
    jobs = [
        pickled.enqueue("os.system", f"touch {markers[0]}"),  # the finding, as written
        job_queue(worker_env.rq_client).enqueue("os.system", f"touch {markers[1]}"),  # JSON payload
        pickled.enqueue(JOB_FUNCTION, Boom(markers[2])),  # a pickle that runs code when read
        job_queue(worker_env.rq_client).enqueue(JOB_FUNCTION, SID, extra=f"touch {markers[3]}"),
    ]
    sid = worker_env.dispatch()
    worker_env.enqueue(sid)  # WorkTrain's own job, behind them: still runs
    run_burst(worker_env)
    assert [m.exists() for m in markers] == [False] * 4, worker_env.worker_log()
    failed = FailedJobRegistry("worktrain", connection=worker_env.rq_client, serializer=JOB_SERIALIZER)
    assert sorted(failed.get_job_ids()) == sorted(job.id for job in jobs)
    for job in jobs:
        result = job_queue(worker_env.rq_client).fetch_job(job.id).latest_result()  # type: ignore[union-attr]
        assert result is not None and "refused by WorkTrain" in (result.exc_string or "")
        assert f"refusing job {job.id}" in worker_env.worker_log()
    record = worker_env.registry.get(sid)
    assert record is not None and record.status == SessionStatus.COMPLETED, worker_env.worker_log()


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        (dict(func_name="os.system", args=["ls"]), "its function is 'os.system'"),
        (dict(args=[SID, SID]), "not exactly one session id"),
        (dict(args=["../../etc"]), "not exactly one session id"),
        (dict(kwargs={"x": 1}), "keyword arguments"),
        (dict(instance=object()), "instance"),
        (dict(_success_callback_name="os.system"), "callbacks"),
        (dict(_failure_callback_name="os.system"), "callbacks"),
        (dict(webhooks=["http://169.254.169.254/"]), "webhooks"),
    ],
)
def test_refusal_names_what_is_wrong(job: dict[str, Any], reason: str) -> None:
    fields = dict(func_name=JOB_FUNCTION, instance=None, args=[SID], kwargs={}, webhooks=[]) | job
    assert reason in (refusal(SimpleNamespace(**fields)) or "")


def test_the_session_job_itself_is_admitted() -> None:
    fields = dict(func_name=JOB_FUNCTION, instance=None, args=[SID], kwargs={}, webhooks=[])
    assert refusal(SimpleNamespace(**fields)) is None


def test_an_unreadable_payload_is_refused() -> None:
    class Unreadable:
        @property
        def func_name(self) -> str:
            raise ValueError("not JSON")

    assert "not WorkTrain's JSON" in (refusal(Unreadable()) or "")
