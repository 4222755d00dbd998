"""Per-turn overhead: a 200-turn daemon session against a bare loop of the same 200 SDK calls.

    .venv/bin/python bench/turn_overhead.py [--turns 200] [--runs 5] [--profile]

One command: starts its own redis-server and the fake Messages API (bench/fakeloop.py, zero
latency, in a child process), then, `--runs` times, alternately:

- daemon: a real session (the RQ job function `worker.jobs.run_session`, in this process:
  claim, lease heartbeat thread, the agent loop, real tools, events to Redis and JSONL,
  a checkpoint per turn, finish) of a one-step workflow whose model asks for one `Read`
  per turn and completes it on turn `--turns`;
- bare: the same `--turns` request bodies, as the fake server recorded them from that
  session, sent with the same SDK call (`client.messages.stream(...).get_final_message()`)
  in a plain loop, to the same server.

Overhead per turn = (daemon wall - bare wall) / turns; per-turn p50 pairs turn i of the
daemon (model call start to the next one's start) with request i of the bare loop. The
gap columns are the daemon's own time between model calls. `--profile` runs one more daemon
session under pyinstrument and prints where that time goes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    LOOP_WORKFLOW_ID,
    ROOT,
    Child,
    bench_env,
    from_daemon,
    machine_line,
    median,
    percentile,
    start_fake_model,
    table,
    write_loop_fixtures,
)

sys.path.insert(0, str(ROOT))


@dataclass
class Calls:
    """(start, end) perf_counter pairs of every model call."""

    spans: list[tuple[float, float]] = field(default_factory=list)
    cpu: float = 0.0  # CPU seconds of this process (all its threads) over the run


@contextmanager
def timed_model(calls: Calls) -> Iterator[None]:
    """Time every AnthropicModel.complete call of the daemon (the SDK call and its adapter)."""
    AnthropicModel = from_daemon("agent.model", "AnthropicModel")

    original = AnthropicModel.complete

    def complete(self: AnthropicModel, request: Any, interrupt: Any = None) -> Any:
        started = time.perf_counter()
        try:
            # (bench/retry_overhead.py runs this file against older trees: no interrupt there)
            return original(self, request) if interrupt is None else original(self, request, interrupt)
        finally:
            calls.spans.append((started, time.perf_counter()))

    AnthropicModel.complete = complete  # type: ignore[method-assign]
    try:
        yield
    finally:
        AnthropicModel.complete = original  # type: ignore[method-assign]


def new_session(workspace: Path) -> str:
    import redis

    Keys = from_daemon("bus.keys", "Keys")
    NewSession = from_daemon("bus.session.registry", "NewSession")
    SessionRegistry = from_daemon("bus.session.registry", "SessionRegistry")

    client = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
    sid = SessionRegistry(client, Keys("wt")).create(
        NewSession(workflowId=LOOP_WORKFLOW_ID, goal="bench", workspacePath=str(workspace), stepCount=1)
    )
    client.close()
    return sid


def run_daemon(workspace: Path, profile: bool = False) -> tuple[str, float, Calls, str]:
    from worker.jobs import run_session

    sid = new_session(workspace)
    calls = Calls()
    profiler = None
    if profile:
        try:
            from pyinstrument import Profiler
        except ImportError:
            raise SystemExit("--profile needs pyinstrument: .venv/bin/pip install -e '.[bench]'") from None

        profiler = Profiler(interval=0.0005)
        profiler.start()
    with timed_model(calls):
        started, cpu = time.perf_counter(), time.process_time()
        outcome = run_session(sid)
        wall = time.perf_counter() - started
        calls.cpu = time.process_time() - cpu
    report = ""
    if profiler is not None:
        profiler.stop()
        report = profiler.output_text(unicode=True, color=False, show_all=False)
    if outcome != "workflow_complete":
        raise RuntimeError(f"the daemon session ended {outcome!r}, expected workflow_complete")
    return sid, wall, calls, report


def recorded_bodies(model_url: str, session_id: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{model_url}/_fake/requests", timeout=30) as response:
        requests = json.loads(response.read())["requests"]
    bodies = []
    for body in requests:
        system = body.get("system") or []
        if any(session_id in str(block.get("text", "")) for block in system):
            bodies.append({k: v for k, v in body.items() if not k.startswith("_") and k != "stream"})
    return bodies


def run_bare(model_url: str, bodies: list[dict[str, Any]]) -> tuple[float, Calls]:
    import anthropic

    client = anthropic.Anthropic(
        api_key="bench-dummy",
        base_url=model_url,
        max_retries=2,
        timeout=anthropic.Timeout(connect=10.0, read=120.0, write=60.0, pool=60.0),
    )
    calls = Calls()
    started, cpu = time.perf_counter(), time.process_time()
    for body in bodies:
        t0 = time.perf_counter()
        with client.messages.stream(**body) as stream:
            stream.get_final_message()
        calls.spans.append((t0, time.perf_counter()))
    wall = time.perf_counter() - started
    calls.cpu = time.process_time() - cpu
    client.close()
    return wall, calls


def turn_times(calls: Calls) -> list[float]:
    """Start of model call i to start of call i+1: one whole turn."""
    starts = [start for start, _ in calls.spans]
    return [b - a for a, b in itertools.pairwise(starts)]


def gaps(calls: Calls) -> list[float]:
    """End of model call i to start of call i+1: the daemon's own time between calls."""
    return [nxt[0] - cur[1] for cur, nxt in zip(calls.spans, calls.spans[1:], strict=False)]


@dataclass
class RunResult:
    daemon_wall: float
    bare_wall: float
    per_turn_overhead: list[float]  # daemon turn i - bare turn i, seconds
    daemon_gaps: list[float]
    daemon_call: list[float]
    bare_call: list[float]
    daemon_cpu: float = 0.0  # CPU seconds of the whole run
    bare_cpu: float = 0.0


def one_run(model_url: str, workspace: Path, turns: int) -> RunResult:
    sid, daemon_wall, daemon_calls, _ = run_daemon(workspace)
    bodies = recorded_bodies(model_url, sid)
    if len(bodies) != turns:
        raise RuntimeError(f"{len(bodies)} model requests recorded for {sid}, expected {turns}")
    bare_wall, bare_calls = run_bare(model_url, bodies)
    daemon_turns, bare_turns = turn_times(daemon_calls), turn_times(bare_calls)
    return RunResult(
        daemon_wall,
        bare_wall,
        [d - b for d, b in zip(daemon_turns, bare_turns, strict=True)],
        gaps(daemon_calls),
        [end - start for start, end in daemon_calls.spans],
        [end - start for start, end in bare_calls.spans],
        daemon_calls.cpu,
        bare_calls.cpu,
    )


@contextmanager
def bench_stack(turns: int) -> Iterator[tuple[str, Path]]:
    """redis-server, the fake model, fixtures, and this process's environment pointing at them."""
    tmp = Path(tempfile.mkdtemp(prefix="wt-turns-"))
    server = from_daemon("host.embedded_redis", "RedisServer")(tmp / "redis")
    server.start()
    saved = dict(os.environ)
    model: Child | None = None
    try:
        workflows, workspace = write_loop_fixtures(tmp, {"maxTurns": turns + 5})
        env = bench_env(server.url, tmp / "data")
        model, model_url = start_fake_model(tmp, env, "--finish-after", str(turns))
        os.environ.clear()
        os.environ.update(
            env,
            WORKTRAIN_WORKFLOWS_DIR=str(workflows),
            ANTHROPIC_BASE_URL=model_url,
            ANTHROPIC_API_KEY="bench-dummy",
            WORKTRAIN_MODEL="claude-bench",
        )
        yield model_url, workspace
    finally:
        os.environ.clear()
        os.environ.update(saved)
        if model is not None:
            model.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def figures(r: RunResult, turns: int) -> list[float]:
    """One run's figures, in the table's column order (seconds, ratios, seconds per turn)."""
    return [
        r.daemon_wall,
        r.bare_wall,
        r.daemon_wall / r.bare_wall,
        (r.daemon_wall - r.bare_wall) / turns,
        median(r.per_turn_overhead),
        percentile(r.per_turn_overhead, 99),
        median(r.daemon_gaps),
        median(r.daemon_call),
        median(r.bare_call),
        r.daemon_cpu / turns,
        r.bare_cpu / turns,
    ]


def cells(values: list[float], bold: bool = False) -> list[str]:
    out = [f"{values[0]:.2f}", f"{values[1]:.2f}", f"{values[2]:.2f}"] + [ms(v) for v in values[3:]]
    if bold:
        out[2], out[4] = f"**{out[2]}**", f"**{out[4]}**"
    return out


def report(results: list[RunResult], turns: int) -> str:
    per_run = [figures(r, turns) for r in results]
    rows = [[f"run {i}", *cells(values)] for i, values in enumerate(per_run, 1)]
    medians = [median([values[c] for values in per_run]) for c in range(len(per_run[0]))]
    rows.append(["**median**", *cells(medians, bold=True)])
    header = [
        f"{turns} turns",
        "daemon s",
        "bare s",
        "ratio",
        "overhead ms/turn",
        "per-turn p50 ms",
        "per-turn p99 ms",
        "daemon gap p50 ms",
        "daemon call p50 ms",
        "bare call p50 ms",
        "daemon CPU ms/turn",
        "bare CPU ms/turn",
    ]
    return table(header, rows)


def main(argv: list[str] | None = None) -> list[RunResult]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="one more daemon run under pyinstrument")
    parser.add_argument(
        "--json", type=Path, help="also write each run's figures here (bench/retry_overhead.py)"
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    with bench_stack(args.turns) as (model_url, workspace):
        one_run(model_url, workspace, args.turns)  # warm-up: imports, connections, script loads
        results = []
        for i in range(args.runs):
            results.append(one_run(model_url, workspace, args.turns))
            print(f"  run {i + 1}: daemon {results[-1].daemon_wall:.2f}s bare {results[-1].bare_wall:.2f}s",
                  file=sys.stderr)  # fmt: skip
        profile = run_daemon(workspace, profile=True)[3] if args.profile else ""
    if args.json:
        args.json.write_text(json.dumps([figures(r, args.turns) for r in results]))
    print(f"\n{machine_line()}\n")
    print(report(results, args.turns))
    print("\ntargets: overhead p50 <= 2 ms per turn; ratio <= 1.3")
    if profile:
        print("\n" + profile)
    print(f"took {time.monotonic() - started:.0f}s")
    return results


if __name__ == "__main__":
    main()
