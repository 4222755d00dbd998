"""The fleet-wide cap (WORKTRAIN_MAX_MODEL_CALLS): throughput against the ideal, and its cost.

    .venv/bin/python bench/model_cap.py [--sessions 50] [--cap 10] [--latency 1.0] [--turns 6]

`--sessions` sessions start together, each the RQ job function (`worker.jobs.run_session`)
in a thread of this process with its own Redis connections and its own `ModelSlots` — as
that many single-session workers would be — against the fake model (bench/fakeloop.py, a
child process) answering every call after `--latency` seconds. Each session makes `--turns`
calls (a `Read` per turn, then `continue_workflow`). With a cap of C and a latency of L the
ideal is C/L calls a second; measured is every call's arrival at the fake, from the first
to the last one's answer. Printed: calls/s against the ideal, the most calls the fake saw
at once, and how evenly the sessions were served (the spread of their finishing times).
The same sessions then run without a cap, for comparison. Last, the round trips of one
acquire (a free slot, and a place in line), one release and one renewal of many slots.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    LOOP_WORKFLOW_ID,
    ROOT,
    bench_env,
    machine_line,
    median,
    start_fake_model,
    table,
    write_loop_fixtures,
)

sys.path.insert(0, str(ROOT))
from daemon.host.embedded_redis import RedisServer


def fetch(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=60) as response:
        return json.loads(response.read())


def run_sessions(
    sessions: int, cap: int, redis_url: str, tmp: Path, model_url: str, turns: int
) -> dict[str, Any]:
    import redis

    from daemon.bus.keys import Keys
    from daemon.bus.session.registry import NewSession, SessionRegistry
    from worker.jobs import run_session

    tmp.mkdir(parents=True)
    workflows, workspace = write_loop_fixtures(tmp, {"maxTurns": turns + 5})
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    client.flushdb()
    registry = SessionRegistry(client, Keys("wt"))
    new = NewSession(workflowId=LOOP_WORKFLOW_ID, goal="cap", workspacePath=str(workspace), stepCount=1)
    ids = [registry.create(new) for _ in range(sessions)]
    env = bench_env(
        redis_url, tmp / "data", WORKTRAIN_WORKFLOWS_DIR=str(workflows), ANTHROPIC_BASE_URL=model_url,
        ANTHROPIC_API_KEY="bench-dummy", WORKTRAIN_MODEL="claude-bench", WORKTRAIN_MAX_MODEL_CALLS=str(cap),
    )  # fmt: skip
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    finished: dict[str, float] = {}
    outcomes: dict[str, str] = {}

    def one(sid: str) -> None:
        outcomes[sid] = run_session(sid)
        finished[sid] = time.time()

    seen_before = len(fetch(f"{model_url}/_fake/requests")["requests"])
    threads = [threading.Thread(target=one, args=(sid,)) for sid in ids]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(900)
    finally:
        os.environ.clear()
        os.environ.update(saved)
        client.close()
    bad = {sid: o for sid, o in outcomes.items() if o != "workflow_complete"}
    if bad or len(outcomes) != sessions:
        raise RuntimeError(f"sessions did not complete: {bad}")
    calls = fetch(f"{model_url}/_fake/requests")["requests"][seen_before:]
    stats = fetch(f"{model_url}/_fake/stats")
    return {"calls": calls, "finished": finished, "max_in_flight": stats["maxInFlight"]}


def figures(result: dict[str, Any], cap: int, latency: float, sessions: int) -> list[str]:
    arrivals = sorted(call["t"] for call in result["calls"])
    span = arrivals[-1] + latency - arrivals[0]
    rate = len(arrivals) / span
    ideal = cap / latency if cap else sessions / latency
    ends = sorted(result["finished"].values())
    spread = (ends[-1] - ends[0], median([e - arrivals[0] for e in ends]))
    return [
        f"{sessions} sessions, cap {cap or 'none'}", str(len(arrivals)), f"{span:.1f}", f"{rate:.2f}",
        f"{ideal:.2f}", f"**{rate / ideal:.3f}**", str(result["max_in_flight"]),
        f"{spread[1]:.1f}", f"{spread[0]:.1f}",
    ]  # fmt: skip


def round_trips(redis_url: str) -> str:
    import redis
    from redis.connection import Connection

    from daemon.bus.fleet.modelslots import ModelSlots
    from daemon.bus.keys import Keys

    class Counting(Connection):
        sent = 0

        def send_packed_command(self, command: Any, check_health: bool = True) -> None:
            Counting.sent += 1
            super().send_packed_command(command, check_health)

    pool = redis.ConnectionPool.from_url(redis_url, decode_responses=True, connection_class=Counting)
    client = redis.Redis(connection_pool=pool)
    client.flushdb()
    slots = ModelSlots(client, Keys("wt").model_slots, 1)
    slots.try_acquire("warm")  # script loads
    slots.release("warm")
    rows = []
    for label, action in (
        ("acquire, a slot free", lambda: slots.try_acquire("a")),
        ("acquire, a place in line", lambda: slots.try_acquire("b")),
        ("release", lambda: slots.release("a")),
        ("renew 16 slots held by one process", lambda: slots.renew([f"t{i}" for i in range(16)])),
    ):
        before = Counting.sent
        action()
        rows.append([label, Counting.sent - before])
    slots.close()
    client.close()
    return table(["semaphore call", "round trips"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--cap", type=int, default=10)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--turns", type=int, default=6)
    args = parser.parse_args(argv)
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="wt-cap-"))
    server = RedisServer(tmp / "redis")
    server.start()
    model = None
    try:
        env = bench_env(server.url, tmp / "data")
        model, model_url = start_fake_model(
            tmp, env, "--latency", str(args.latency), "--finish-after", str(args.turns), "--compact"
        )
        rows = []
        for cap in (args.cap, 0):  # the capped run first: the fake's max in flight only grows
            result = run_sessions(args.sessions, cap, server.url, tmp / f"cap{cap}", model_url, args.turns)
            rows.append(figures(result, cap, args.latency, args.sessions))
            print(f"  cap {cap or 'none'}: {rows[-1][3]} calls/s", file=sys.stderr)
        trips = round_trips(server.url)
    finally:
        if model is not None:
            model.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{machine_line()}\n")
    header = ["run", "calls", "span s", "calls/s", "ideal calls/s", "of ideal", "max in flight at the fake",
              "median session end s", "first to last session end s"]  # fmt: skip
    print(table(header, rows))
    print(f"\nmodel latency {args.latency}s, {args.turns} calls a session; ideal = cap / latency\n")
    print(trips)
    print(f"\ntook {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
