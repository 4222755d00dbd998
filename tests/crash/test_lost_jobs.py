"""A worker killed between taking a session's job from the queue and claiming the session
(docs/durability.md "Receipts and stuck sessions"): the session runs within a lease plus one reaper
pass, once. The kill is the `before_claim` fault point (daemon/host/faults.py): the work horse
itself (its RQ worker sees it die and fails the job), or the RQ worker that took the job
(nobody fails it: RQ leaves it `started`)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from rq.job import Job

from tests.crash.harness import Stack, wait_until

pytestmark = pytest.mark.e2e

LEASE = 2.0
PASS = LEASE / 3  # the reaper's interval (daemon.bus.fleet.reaper.Reaper.interval_seconds)
SLACK = 3.0  # process start, a job's pickup, a shared and noisy machine


@pytest.mark.parametrize(("kill", "job_status"), [("self", "failed"), ("worker", "started")])
def test_a_job_lost_between_dequeue_and_claim_is_run_again(
    make_stack: Callable[..., Stack], kill: str, job_status: str
) -> None:
    stack = make_stack(lease_seconds=LEASE, faults=True).start(workers=1, processes=2)
    assert stack.client is not None
    dispatched = time.monotonic()
    sid = stack.dispatch({"worktrainFault": {"point": "before_claim", "kill": kill}})
    wait_until(lambda: "fault injection: killing" in stack.proc("worker1").log(), "the kill", 30)
    wait_until(lambda: stack.record(sid).get("attempt") == "1", "the session to be claimed", LEASE + 20)
    claimed_after = time.monotonic() - dispatched
    print(f"kill={kill}: claimed {claimed_after:.1f}s after dispatch (lease {LEASE:.0f}s, pass {PASS:.2f}s)")
    assert claimed_after < LEASE + PASS + SLACK, stack.logs()
    record = stack.wait_finished(sid)
    assert (record["status"], record["outcome"], record["attempt"]) == ("completed", "workflow_complete", "1")
    assert record["jobs"] == "2"  # one job enqueued again, not one per pass
    first = Job.fetch(sid, connection=stack.redis_bytes())
    assert first.get_status() == job_status
    assert not stack.client.exists(f"rq:job:{sid}-r3")
