"""A turn's CPU by phase, and Redis's work per turn, in measures that hold on a loaded machine.

    .venv/bin/python bench/turn_cpu.py [--turns 200] [--runs 3]     # ~1 min

One command: its own redis-server and fake model (bench/turn_overhead.py's stack: a one-step
workflow whose model asks for one `Read` per turn and completes it on turn `--turns`), then
`--runs` pairs of real sessions through the RQ job function in this process:

- one instrumented (bench/phases.py): CPU time per phase, each phase's functions' own
  (`time.thread_time`), and the Redis round trips each phase makes; the rest of the
  process's CPU (`time.process_time`) is "other";
- one as it is: the process's CPU per turn without the wrappers, and Redis's work per turn:
  `INFO commandstats` after a `CONFIG RESETSTAT` (calls and microseconds per command; the
  nested calls of a script are counted under their own names as well, `evalsha` is the
  scripts' whole time) and the redis-server process's CPU time from /proc (commands, and
  the network I/O and event loop around them).

Both CPU time and commandstats' microseconds hold far better on a loaded machine than wall
time: a process waiting for a core spends no CPU (commandstats does count a preemption in
the middle of a command, which is rare: commands last microseconds). The session's setup
and finish are in every figure, spread over its turns; the fake model is not.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CLOCK_TICKS, ROOT, machine_line, median, table
from phases import Ledger, instrumented
from turn_overhead import bench_stack, run_daemon

sys.path.insert(0, str(ROOT))


def redis_stats(client: Any) -> dict[str, tuple[int, int]]:
    """command -> (calls, usec) from INFO commandstats."""
    stats = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for name, v in stats.items()}


@dataclass
class Run:
    turns: int
    cpu: float  # the process's CPU seconds over the session
    ledger: Ledger
    redis: dict[str, tuple[int, int]]
    redis_cpu: float = 0.0  # the redis-server process's CPU seconds over the session


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def one_run(workspace: Path, turns: int, client: Any, instrument: bool) -> Run:
    client.config_resetstat()
    redis_pid = int(client.info("server")["process_id"])
    ledger = Ledger()
    with instrumented(ledger) if instrument else nullcontext():
        cpu, redis_cpu = time.process_time(), process_cpu(redis_pid)
        run_daemon(workspace)
        cpu, redis_cpu = time.process_time() - cpu, process_cpu(redis_pid) - redis_cpu
    stats = redis_stats(client)
    stats.pop("config|resetstat", None)
    stats.pop("config", None)
    return Run(turns, cpu, ledger, stats, redis_cpu)


def report(runs: list[Run], bare: list[Run], turns: int) -> str:
    phases = sorted(
        {p for r in runs for p in r.ledger.cpu}, key=lambda p: -median([r.ledger.cpu[p] for r in runs])
    )
    rows: list[list[object]] = []
    for phase in phases:
        cpu = median([r.ledger.cpu[phase] / turns * 1e6 for r in runs])
        calls = median([r.ledger.calls[phase] / turns for r in runs])
        trips = median([r.ledger.trips[phase] / turns for r in runs])
        rows.append([phase, f"{cpu:.0f}", f"{calls:.2f}", f"{trips:.2f}"])
    others = sorted({p for r in runs for p in r.ledger.trips if p not in phases})
    for phase in others:
        rows.append([phase, "", "", f"{median([r.ledger.trips[phase] / turns for r in runs]):.2f}"])
    attributed = median([sum(r.ledger.cpu.values()) / turns * 1e6 for r in runs])
    total = median([r.cpu / turns * 1e6 for r in runs])
    trips = median([sum(r.ledger.trips.values()) / turns for r in runs])
    rows.append(
        ["other (not in a phase: thread switches, GC, the rest)", f"{total - attributed:.0f}", "", ""]
    )
    rows.append(["**the process, instrumented**", f"**{total:.0f}**", "", f"**{trips:.2f}**"])
    rows.append(
        [
            "**the process, not instrumented**",
            f"**{median([r.cpu / turns * 1e6 for r in bare]):.0f}**",
            "",
            "",
        ]
    )
    out = table(["phase (CPU per turn, median of runs)", "µs", "calls", "Redis round trips"], rows)
    commands = sorted(
        {c for r in runs + bare for c in r.redis},
        key=lambda c: -median([r.redis.get(c, (0, 0))[1] for r in bare]),
    )
    redis_rows = []
    for command in commands:
        calls = median([r.redis.get(command, (0, 0))[0] / turns for r in bare])
        usec = median([r.redis.get(command, (0, 0))[1] / turns for r in bare])
        redis_rows.append([command, f"{calls:.2f}", f"{usec:.1f}"])
    scripts = median([r.redis.get("evalsha", (0, 0))[1] / turns for r in bare])
    process = median([r.redis_cpu / turns * 1e6 for r in bare])
    redis_rows.append(["**the scripts (`evalsha`, their own calls included)**", "", f"**{scripts:.1f}**"])
    redis_rows.append(["**the redis-server process (CPU time, /proc)**", "", f"**{process:.0f}**"])
    out += "\n\n" + table(
        ["Redis command (INFO commandstats, not instrumented runs)", "calls per turn", "µs per turn"],
        redis_rows,
    )
    return out


def main(argv: list[str] | None = None) -> None:
    import redis

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    started = time.monotonic()
    print(f"\n{machine_line()}\n", file=sys.stderr)
    with bench_stack(args.turns) as (_model_url, workspace):
        client = redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True)
        one_run(workspace, args.turns, client, instrument=False)  # warm-up
        runs, bare = [], []
        for i in range(args.runs):
            runs.append(one_run(workspace, args.turns, client, instrument=True))
            bare.append(one_run(workspace, args.turns, client, instrument=False))
            cpu = [r.cpu / args.turns * 1e3 for r in (runs[-1], bare[-1])]
            print(f"  run {i + 1}: {cpu[0]:.2f} / {cpu[1]:.2f} ms a turn", file=sys.stderr)
        client.close()
    print(f"\n{machine_line()}\n")
    print(report(runs, bare, args.turns))
    print(f"\ntook {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
