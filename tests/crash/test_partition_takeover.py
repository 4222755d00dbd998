"""A partitioned worker host cannot swallow its re-enqueued job (docs/durability.md, "Partitions").

worker1 reaches Redis through tests/crash/lossyproxy.py, with two RQ processes: one runs the
session, the other sits idle in RQ's blocking dequeue (BLMOVE). worker2 is healthy. The
proxy is cut (resets, or a silent blackhole). Redis cannot tell that worker1's idle BLMOVE
is gone; before the fix it blocked for 405 s, so the reaper's re-enqueued job went to it and
sat in `rq:queue:worktrain:intermediate` for another lease (measured in the fleet run: 85 s
instead of 35 s). Now the dequeue blocks for half a lease at most: the job runs on worker2
within lease + one reaper pass + 2 s of the cut.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from daemon.host.embedded_redis import free_port
from tests.crash.harness import Stack, ancestors, pid_of_worker, wait_until
from tests.crash.lossyproxy import LossyProxy

pytestmark = pytest.mark.e2e

LEASE = 6.0


def run_takeover(make_stack: Callable[..., Stack], mode: str) -> float:
    stack = make_stack(lease_seconds=LEASE, idle_wait_seconds=60)
    stack.model.hold_when = lambda sid, n: True  # every session stays at its model call
    stack.start_backends()
    assert stack.redis_server is not None and stack.client is not None
    proxy = LossyProxy(stack.redis_server.port, seed=1).start()
    try:
        stack.web_port = free_port()
        stack.start_web()
        stack.tier_redis_url = proxy.url
        cut = stack.start_worker("worker1", processes=2)  # one runs the session, one idles in BLMOVE
        sid = stack.dispatch()
        wait_until(lambda: stack.model.held(sid), "the session at its model call on worker1", 60)
        stack.tier_redis_url = None
        healthy = stack.start_worker("worker2", processes=2)
        time.sleep(1.0)  # every idle process blocked in its dequeue
        first = stack.record(sid)["attempt"]
        proxy.partition(mode)
        cut_at = time.monotonic()

        def elsewhere() -> bool:
            record = stack.record(sid)
            worker = record.get("worker", "")
            return (
                record.get("attempt") != first
                and bool(worker)
                and healthy.pid in ancestors(pid_of_worker(worker))
            )

        wait_until(elsewhere, "the session to run on worker2", 120, every=0.1)
        took = time.monotonic() - cut_at
        taken = stack.redis_bytes().lrange("rq:queue:worktrain:intermediate", 0, -1)
        bound = LEASE + LEASE / 3 + 2.0
        figures = f"partition={mode} lease={LEASE:.0f}s takeover={took:.1f}s bound={bound:.1f}s"
        print(figures, f"intermediate={taken}")
        assert took <= bound, f"takeover {took:.1f} s > lease + reaper pass + 2 s = {bound:.1f} s"
        assert cut.process.poll() is None and healthy.process.poll() is None
        stack.model.release(sid)
        return took
    finally:
        proxy.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["reset", "blackhole"])
def test_a_cut_hosts_job_runs_elsewhere_within_lease_and_a_pass(
    make_stack: Callable[..., Stack], mode: str
) -> None:
    run_takeover(make_stack, mode)
