"""Redis failover under steering (docs/durability.md, "Redis failover"; issue 41).

The harness is tests/crash/failover.py: a primary, two replicas and three sentinels; web and
two worker tiers reach Redis only through `REDIS_URL=redis+sentinel://...`; a coordinator
steers six sessions and a dispatcher dispatches one a second while one fault happens. With
WORKTRAIN_REDIS_WAIT_REPLICAS=1 and two replicas, judged by what the fake model received:
every steer answered 200 reaches the model exactly once, every dispatch answered 202 is
still there and finishes, nothing is answered 500 or for another steer, every session
finishes, no tier process exits.

- a stall (DEBUG SLEEP) past the web tier's read timeout: issue 41's first defect (replies
  read out of step after a timeout, redis-py 8.1 with Sentinel);
- `SENTINEL FAILOVER` (the replica not promoted stays on the old primary for seconds and
  acknowledged WAIT 1 there);
- the primary cut off from its replicas and sentinels but not from web and workers (the
  split brain: writes went to the isolated primary);
- kill -9 of the primary (chaos: the same path as a failover, plus a restart).

The default suite runs the first three; WORKTRAIN_CHAOS=1 runs them all for both WAIT
settings (without WAIT the loss is measured and printed, not judged). Each prints its figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from daemon.bus.keys import Keys
from daemon.bus.session.registry import NewSession, SessionRegistry
from daemon.host.embedded_redis import RedisServer, free_port
from tests.crash.failover import LEASE, Figures, run_scenario
from tests.crash.harness import WORKFLOW_ID, WORKTRAIN, Stack, wait_until

pytestmark = pytest.mark.e2e

# Steers are answered 200 again within this long after a writable primary exists: issue 41's
# partition answered 503 for 18-28 s, a forced failover left a 10 s hole (connections stayed
# on the old primary); these runs took 0.4-4.4 s.
RECOVERY_SECONDS = 6.0


def assert_nothing_lost(figures: Figures) -> None:
    print(figures.line())
    if figures.problems:
        print("\n".join(figures.problems[:20]))
    assert figures.answered > 0 and figures.dispatched > 0, figures.line()
    assert (figures.lost, figures.duplicated, figures.wiped, figures.unfinished) == (0, 0, 0, 0), (
        figures.problems
    )
    assert (figures.http_500, figures.wrong_replies) == (0, 0), figures.line()
    assert figures.left == 0, "an attempt left its session although its lease survived"
    assert figures.longest_gap <= figures.fault_seconds + RECOVERY_SECONDS, figures.line()
    assert figures.problems == [], figures.problems


# Over 30 s (about 35 s on 2 quiet cores), and rightly: three sentinels must find each other
# (their hello messages go every 2 s) before anything starts, the steering lasts 4 s before the
# primary changes and 6 s after it, the promotion itself takes seconds, and then every session
# is steered to its end.
@pytest.mark.timeout(400)
@pytest.mark.parametrize("scenario", ["stall", "sentinel-failover", "partition"])
def test_acknowledged_changes_survive_with_wait_and_two_replicas(
    make_stack: Callable[..., Stack], scenario: str
) -> None:
    assert_nothing_lost(run_scenario(make_stack, scenario, wait=1))


@pytest.mark.chaos
@pytest.mark.timeout(400)
def test_acknowledged_changes_survive_a_kill_9_of_the_primary(make_stack: Callable[..., Stack]) -> None:
    assert_nothing_lost(run_scenario(make_stack, "kill-primary", wait=1))


@pytest.mark.chaos  # minutes (sessions the failover wiped are waited for), and it judges nothing
@pytest.mark.timeout(600)
@pytest.mark.parametrize("scenario", ["stall", "sentinel-failover", "partition", "kill-primary"])
def test_without_wait_the_loss_is_measured(make_stack: Callable[..., Stack], scenario: str) -> None:
    """Documents (docs/durability.md), does not judge: what a failover loses without WAIT."""
    figures = run_scenario(make_stack, scenario, wait=0, finish_timeout=45)
    print(figures.line())
    assert figures.answered > 0


def test_a_replica_is_an_outage_never_a_500(make_stack: Callable[..., Stack]) -> None:
    """The web tier pointed straight at a replica (what a failover leaves a plain URL on):
    READONLY is an outage, 503 steer_bus_unavailable (it was 500 internal_error), and
    /readyz answers 503 (it said 200)."""
    stack = make_stack(lease_seconds=LEASE)
    stack.start_backends()
    assert stack.redis_server is not None and stack.client is not None
    replica = RedisServer(
        stack.tmp / "replica", extra_args=("--replicaof", "127.0.0.1", str(stack.redis_server.port))
    )
    replica.start()
    try:
        keys = Keys("wt")
        new = NewSession(workflowId=WORKFLOW_ID, goal="g", workspacePath=str(stack.workspace), stepCount=1)
        sid = SessionRegistry(stack.client, keys).create(new)
        # WAIT's own timeout under the client's 5 s read timeout, asked until the replica has it:
        # a WAIT of 5000 ms raced the read timeout on a loaded host (Redis 7, a full run)
        wait_until(lambda: int(stack.client.execute_command("WAIT", 1, 1000)) >= 1, "the replica synced", 30)
        stack.tier_redis_url = replica.url
        stack.web_port = free_port()
        args = ["web", "--bind", "127.0.0.1", "--port", str(stack.web_port), "--workers", "1"]
        stack.spawn("web", [*WORKTRAIN, *args])
        deadline = time.monotonic() + 30
        while stack.ready() == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert stack.ready() == 503
        answer = stack.steer(sid, "to a replica", "c-1")
        assert (answer.status, answer.body.get("code")) == (503, "steer_bus_unavailable"), answer
        assert "retry-after" in answer.headers
        dispatched = stack.http(
            "POST",
            "/api/v2/auto/dispatch",
            {"workflowId": WORKFLOW_ID, "goal": "g", "workspacePath": str(stack.workspace)},
        )
        assert dispatched.status == 503, dispatched
    finally:
        replica.kill()
