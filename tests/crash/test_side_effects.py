"""docs/durability.md, "fencing reaches every side effect", proven by ground truth
(tests/crash/groundtruth.py):
what the fake model received and from which attempt and process, which Bash commands really
ran and when, what the event streams hold. Real processes, real redis-server, seeded.

- Redis SIGKILLed and restarted while model replies are in flight (one `-c 16` process,
  lease 3 s): no Bash run, no model request and no event of a superseded attempt;
- one worker tier partitioned from Redis (connection resets for 8 s; a silent blackhole)
  while another tier is healthy: the same, and nothing after `session_completed`;
- a `-c 16` process frozen (SIGSTOP) past its lease while another tier takes its sessions
  over: the thawed process sends no model request for a session it lost.

The long campaigns (more seeds, a 40 s partition) are marked `chaos` (WORKTRAIN_CHAOS=1):

    WORKTRAIN_CHAOS=1 .venv/bin/python -m pytest tests/crash/test_side_effects.py -m chaos -s -q
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from daemon.host.embedded_redis import free_port
from tests.crash.groundtruth import ClaimWatch, TruthModel, Verdict, judge
from tests.crash.harness import Stack, pid_of_worker, wait_until
from tests.crash.lossyproxy import LossyProxy

pytestmark = pytest.mark.e2e

LEASE = 3.0
SESSIONS = 8


def truth_stack(
    make_stack: Callable[..., Stack], latency: float = 0.4, **options: object
) -> tuple[Stack, TruthModel]:
    model = TruthModel(latency=latency, bash_sleep=0.3)
    stack = make_stack(lease_seconds=LEASE, model=model, concurrency=16, **options)
    model.truth = stack.workspace / ".truth.log"  # where the agent's Bash may write
    return stack, model


def finish_and_judge(
    stack: Stack, model: TruthModel, watch: ClaimWatch, sids: list[str], label: str
) -> Verdict:
    for sid in sids:
        stack.wait_finished(sid, timeout=120)
    time.sleep(LEASE)  # every chance for a stale write to land
    watch.stop()
    verdict = judge(stack, model, watch, sids)
    print(f"{label}: {verdict.line()}")
    assert verdict.clean, (verdict, stack.logs()[-4000:])
    return verdict


def run_redis_restart(make_stack: Callable[..., Stack], seed: int) -> Verdict:
    rng = random.Random(seed)
    stack, model = truth_stack(make_stack)
    stack.start(workers=1, processes=1, redis_port=free_port())
    assert stack.redis_server is not None and stack.client is not None
    model.redis = stack.client
    sids = [stack.dispatch() for _ in range(SESSIONS)]
    watch = ClaimWatch(stack.client, sids).start()
    wait_until(lambda: len(model.arrivals) >= SESSIONS * 2, "replies in flight", 60)
    time.sleep(rng.uniform(0.0, 0.4))
    stack.redis_server.kill()  # SIGKILL, AOF everysec
    down = rng.uniform(3.2, 4.5)  # past the lease: the reaper races the heartbeats
    time.sleep(down)
    stack.redis_server.start()
    return finish_and_judge(stack, model, watch, sids, f"redis restart seed={seed} down={down:.2f}s")


@pytest.mark.parametrize("seed", [2])
def test_redis_restart_leaves_no_side_effect_of_a_superseded_attempt(
    make_stack: Callable[..., Stack], seed: int
) -> None:
    run_redis_restart(make_stack, seed)


@pytest.mark.chaos
@pytest.mark.parametrize("seed", range(100, 120))
def test_redis_restart_campaign(make_stack: Callable[..., Stack], seed: int) -> None:
    run_redis_restart(make_stack, seed)


def run_partition(make_stack: Callable[..., Stack], seed: int, mode: str, seconds: float) -> Verdict:
    rng = random.Random(seed)
    stack, model = truth_stack(make_stack, latency=1.0)  # sessions outlive the partition's start
    stack.start_backends()
    assert stack.redis_server is not None and stack.client is not None
    model.redis = stack.client
    proxy = LossyProxy(stack.redis_server.port, seed).start()
    try:
        stack.web_port = free_port()
        stack.start_web()
        stack.tier_redis_url = proxy.url  # worker1 reaches Redis through the proxy only
        cut = stack.start_worker("worker1")
        stack.tier_redis_url = None
        stack.start_worker("worker2")  # the healthy tier, to take the cut tier's sessions over
        sids = [stack.dispatch() for _ in range(SESSIONS)]
        watch = ClaimWatch(stack.client, sids).start()
        wait_until(lambda: len(model.arrivals) >= SESSIONS, "every session at work", 60)
        time.sleep(rng.uniform(0.2, 1.0))
        proxy.partition(mode)
        time.sleep(seconds)
        proxy.heal()
        verdict = finish_and_judge(stack, model, watch, sids, f"partition {mode} {seconds:.0f}s seed={seed}")
        assert cut.process.poll() is None, "the cut-off tier survived its partition"
        return verdict
    finally:
        proxy.close()


@pytest.mark.parametrize("mode", ["reset", "blackhole"])
def test_a_partitioned_tier_leaves_no_side_effect_of_a_superseded_attempt(
    make_stack: Callable[..., Stack], mode: str
) -> None:
    run_partition(make_stack, 7, mode, 8.0)


@pytest.mark.chaos
@pytest.mark.parametrize("seconds", [8.0, 40.0])
@pytest.mark.parametrize("mode", ["reset", "blackhole"])
@pytest.mark.parametrize("seed", range(200, 205))
def test_partition_campaign(make_stack: Callable[..., Stack], seed: int, mode: str, seconds: float) -> None:
    run_partition(make_stack, seed, mode, seconds)


def run_freezes(make_stack: Callable[..., Stack], seed: int, cycles: int) -> Verdict:
    """Freeze the `-c 16` tier running the sessions past its lease (model replies in flight,
    so threads sit between their guard and their send), let the other tier take them, thaw."""
    rng = random.Random(seed)
    stack, model = truth_stack(make_stack)
    model.resolve_pids = True
    stack.start(workers=1, processes=1)
    assert stack.client is not None
    model.redis = stack.client
    stack.start_worker("worker2")
    sids = [stack.dispatch() for _ in range(SESSIONS)]
    watch = ClaimWatch(stack.client, sids).start()
    wait_until(lambda: len(model.arrivals) >= SESSIONS, "every session at work", 60)
    for cycle in range(cycles):
        live = [s for s in sids if stack.record(s).get("status") in ("running", "waiting")]
        if not live:
            break
        victim = stack.worker_running(live[0])
        time.sleep(rng.uniform(0.0, 0.3))
        frozen = stack.freeze_tier(victim)
        time.sleep(LEASE + 2.0)
        stack.thaw_tier(victim, frozen)
        print(f"cycle {cycle}: froze {victim.name} for {LEASE + 2.0:.0f}s")
        time.sleep(1.0)
    verdict = finish_and_judge(stack, model, watch, sids, f"freeze seed={seed} cycles={cycles}")
    senders = {a.pid for a in model.arrivals}
    assert 0 not in senders, "every request's sending process was found"
    owners = {pid_of_worker(stack.record(s)["worker"]) for s in sids}
    print(f"sending processes {sorted(senders)}; sessions finished on {sorted(owners)}")
    return verdict


def test_a_thawed_process_sends_nothing_for_sessions_it_lost(make_stack: Callable[..., Stack]) -> None:
    run_freezes(make_stack, 11, cycles=1)


@pytest.mark.chaos
@pytest.mark.parametrize("seed", range(300, 305))
def test_freeze_campaign(make_stack: Callable[..., Stack], seed: int) -> None:
    run_freezes(make_stack, seed, cycles=5)
