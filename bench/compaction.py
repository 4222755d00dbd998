"""Compaction (docs/DEVELOPING.md): what one costs the daemon, and the sizes of a 300-turn session.

    .venv/bin/python bench/compaction.py [--repeat 20] [--turns 300] [--window 200000]

1. **One compaction of a 200-turn history**: a synthetic history (each turn a short reply
   with a `Read` call and its ~4 KB result) in a window it has outgrown; `ModelTurn.compact`
   (plan, summary request, the new history, its JSON for the checkpoint) is timed in CPU
   seconds with a model that answers at once, so the model call is excluded; then the
   checkpoint that stores the compacted history, on a real redis-server, in wall seconds.
2. **A 300-turn session** (`worker.jobs.run_session` in this process, a real redis-server,
   the fake model in a thread enforcing the window): every turn reads a 6 KB file. At each
   call the fake notes the request's size and the stored history (`wt:session:{id}:history`:
   entries and bytes). The same session runs twice, side by side: with compaction (the
   window, default 200,000 tokens) and without (a window too large to reach).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    LOOP_WORKFLOW_ID,
    ROOT,
    bench_env,
    machine_line,
    median,
    percentile,
    table,
    write_loop_fixtures,
)

sys.path.insert(0, str(ROOT))
from daemon.host.embedded_redis import RedisServer

FILE = ("A line of a six-kilobyte file the agent reads on every turn. " + "\n") * 100


# --- 1. one compaction ----------------------------------------------------------------------


class NoChannel:
    """A channel that takes the checkpoint's arguments and does nothing with them."""

    def __init__(self) -> None:
        from daemon.turn.interrupt import TurnInterrupt

        self.interrupt = TurnInterrupt("bench")  # never requested: nothing interrupts here

    def heartbeat(self) -> Any:
        raise AssertionError("no wait in this bench")

    def mark_waiting(self, reason: str | None) -> None:
        pass

    def guard(self) -> None:
        pass

    def checkpoint(self, keep: int, messages: Any, delivered: Any, turn: int, fields: Any = None) -> None:
        self.stored = messages


def synthetic_session(turns: int) -> Any:
    from daemon.agent.state import SessionState
    from daemon.tools import WorkflowCursor
    from daemon.turn.messages import (
        Message,
        TextBlock,
        ToolResultBlock,
        ToolUseBlock,
        first_message,
        turn_end_message,
    )
    from daemon.workflows import Workflow, WorkflowStep

    workflow = Workflow(id="w", name="w", steps=(WorkflowStep(id="s", title="s", prompt="Read the files."),))
    s = SessionState(WorkflowCursor(workflow))
    s.history.append(first_message("Read the files.", []))
    for turn in range(1, turns + 1):
        use = ToolUseBlock(id=f"toolu_{turn:04d}", name="Read", input={"path": f"src/file_{turn}.py"})
        said = TextBlock(text=f"Turn {turn}: reading the next file to see how it fits together. " * 3)
        s.history.append(Message(role="assistant", content=(said, use)))
        result = ToolResultBlock(
            tool_use_id=use.id, content=f"# file {turn}\n" + "x = compute(y)  # a line\n" * 160
        )
        message = turn_end_message([result], [], [f"steer {turn}"] if turn % 25 == 0 else [])
        assert message is not None
        s.history.append(message)
    return s


def one_compaction(turns: int, window: int, client: Any) -> tuple[float, float, int, int, int]:
    """(CPU s of the compaction, wall s of its checkpoint on Redis, before, after, turns summarised)."""
    from daemon.agent.modelcall import CallSettings
    from daemon.agent.modelturn import ModelTurn
    from daemon.agent.state import AttemptState
    from daemon.bus.keys import Keys
    from daemon.bus.session.registry import NewSession, SessionRegistry
    from daemon.bus.session.steerbus import SteerBus
    from daemon.fakemodel import ScriptedModel, reply, text
    from daemon.host.clock import SystemClock
    from daemon.schema.events import ContextCompacted
    from daemon.tools import default_toolbox

    s = synthetic_session(turns)
    model = ScriptedModel(rule=lambda request: reply(text("A summary of what was read.")))
    events: list[Any] = []

    class Sink:
        def emit(self, *given: Any) -> None:
            events.extend(given)

    channel = NoChannel()
    settings = CallSettings(context_tokens=window)
    own = AttemptState("sess_01JD0000000000000000000000", Path("/tmp"), "You are a bench." * 100, None)
    ask = ModelTurn(
        s, own, model, channel, SystemClock(), Sink(), settings, lambda: False, default_toolbox().specs()
    )
    before = ask.estimate()
    started = time.process_time()
    assert ask.compact(turns + 1, before, hard=False) is True
    cpu = time.process_time() - started
    [event] = [e for e in events if isinstance(e, ContextCompacted)]
    keys = Keys("wt")
    sid = SessionRegistry(client, keys).create(NewSession(workflowId="w", goal="g", workspacePath="/tmp"))
    real = SteerBus(client, keys).channel(sid, "bench", 30)
    real.claim()
    started = time.perf_counter()
    real.checkpoint(0, channel.stored, [], turns + 1, s.fields())
    wall = time.perf_counter() - started
    return cpu, wall, event.beforeTokens, event.afterTokens, event.turnsSummarized


def compaction_cost(repeat: int, turns: int, window: int, client: Any) -> str:
    results = [one_compaction(turns, window, client) for _ in range(repeat + 1)][1:]  # the first warms up
    cpu = [r[0] * 1000 for r in results]
    wall = [r[1] * 1000 for r in results]
    _, _, before, after, summarised = results[0]
    rows = [[
        f"{turns} turns, window {window:,}", f"{before:,} -> {after:,}", summarised,
        f"{median(cpu):.1f}", f"{percentile(cpu, 90):.1f}",
        f"{median(wall):.1f}", f"{percentile(wall, 90):.1f}",
    ]]  # fmt: skip
    header = ["history", "tokens before -> after", "turns summarised", "CPU p50 ms", "CPU p90 ms",
              "checkpoint p50 ms", "checkpoint p90 ms"]  # fmt: skip
    return table(header, rows)


# --- 2. a 300-turn session ------------------------------------------------------------------


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def session_sizes(
    turns: int, window: int, compact: bool, redis_url: str, tmp: Path
) -> tuple[list[dict[str, int]], float]:
    """Run one session; per model call: request tokens, stored history entries and bytes."""
    import redis

    from daemon.agent.model import ModelRequest
    from daemon.bus.keys import Keys
    from daemon.bus.session.registry import NewSession, SessionRegistry
    from daemon.fakemodel import FakeModelServer, reply, summarising, text, tool
    from daemon.fakemodel.usage import prompt_tokens
    from worker.jobs import run_session

    tmp.mkdir(parents=True)
    workflows, workspace = write_loop_fixtures(tmp, {"maxTurns": turns + 5})
    (workspace / "big.txt").write_text(FILE)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    sid = SessionRegistry(client, Keys("wt")).create(
        NewSession(workflowId=LOOP_WORKFLOW_ID, goal="bench", workspacePath=str(workspace), stepCount=1)
    )
    history_key = Keys("wt").session(sid).history
    samples: list[dict[str, int]] = []
    notes = "Benchmark notes: the loop read big.txt on every turn and is done with this step now."

    def rule(request: ModelRequest) -> Any:
        turn = len(samples) + 1
        stored = client.lrange(history_key, 0, -1)
        samples.append({"turn": turn, "messages": len(stored), "bytes": sum(len(m) for m in stored)})  # type: ignore[arg-type]
        if turn >= turns:
            return reply(text("done"), tool("continue_workflow", notes=notes))
        return reply(text(f"Turn {turn}: reading."), tool("Read", path="big.txt"))

    class Sizing(FakeModelServer):
        def record(self, body: dict[str, Any]) -> None:
            if body.get("tools"):  # the summary calls are not the session's requests
                self.sizes.append(prompt_tokens(body))

    server = Sizing(rule=summarising(rule), max_prompt_tokens=window if compact else None)
    server.sizes = []  # type: ignore[attr-defined]
    url = server.start()
    env = bench_env(redis_url, tmp / "data", WORKTRAIN_WORKFLOWS_DIR=str(workflows), ANTHROPIC_BASE_URL=url,
                    ANTHROPIC_API_KEY="bench-dummy", WORKTRAIN_MODEL="claude-bench",
                    WORKTRAIN_CONTEXT_TOKENS=str(window if compact else 10**9))  # fmt: skip
    try:
        with environment(env):
            started = time.perf_counter()
            outcome = run_session(sid)
            wall = time.perf_counter() - started
    finally:
        server.stop()
        client.close()
    if outcome != "workflow_complete":
        raise RuntimeError(f"the session ended {outcome}")
    for sample, size in zip(samples, server.sizes, strict=False):  # type: ignore[attr-defined]
        sample["request"] = size
    return samples, wall


def growth_report(turns: int, window: int, redis_url: str, tmp: Path) -> str:
    compacted, wall_c = session_sizes(turns, window, True, redis_url, tmp / "compacted")
    full, wall_f = session_sizes(turns, window, False, redis_url, tmp / "full")
    points = sorted(p for p in {1, 10, 25, 50, *range(100, turns + 1, 50), turns} if p <= turns)
    rows = []
    for turn in points:
        c, f = compacted[turn - 1], full[turn - 1]
        rows.append([
            turn, f"{c['request']:,}", c["messages"], f"{c['bytes'] / 1024:.0f}",
            f"{f['request']:,}", f["messages"], f"{f['bytes'] / 1024:.0f}",
        ])  # fmt: skip
    header = ["turn", "compacted: request tokens", "stored messages", "stored KiB",
              "uncompacted: request tokens", "stored messages", "stored KiB"]  # fmt: skip
    later = [c["request"] for c in compacted[turns // 3 :]]
    largest = max(c["request"] for c in compacted)
    summary = (
        f"\nwith compaction, from turn {turns // 3} on: request tokens min {min(later):,}, "
        f"max {max(later):,}, "
        f"stdev {statistics.pstdev(later):,.0f}; the largest request {largest:,} (window {window:,}); "
        f"session wall {wall_c:.1f}s, {wall_f:.1f}s uncompacted"
    )
    return table(header, rows) + summary


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--history", type=int, default=200, help="turns of the compacted history (1.)")
    parser.add_argument("--turns", type=int, default=300, help="turns of the session (2.)")
    parser.add_argument("--window", type=int, default=200_000)
    args = parser.parse_args(argv)
    started = time.monotonic()
    import redis

    tmp = Path(tempfile.mkdtemp(prefix="wt-compaction-"))
    server = RedisServer(tmp / "redis")
    server.start()
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        cost = compaction_cost(args.repeat, args.history, args.window, client)
        growth = growth_report(args.turns, args.window, server.url, tmp)
    finally:
        client.close()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{machine_line()}\n")
    print(f"One compaction (median of {args.repeat}):\n")
    print(cost)
    print(f"\nA {args.turns}-turn session, a 6 KB file read per turn:\n")
    print(growth)
    print(f"\ntook {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
