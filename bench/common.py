"""Shared by the benchmarks: child processes, /proc readings, the machine line, tables."""

from __future__ import annotations

import importlib
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def bench_env(redis_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a bench child: no WORKTRAIN_* of the caller's, never the real API."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "ANTHROPIC_"))}
    env.update(
        REDIS_URL=redis_url,
        WORKTRAIN_DATA_DIR=str(data_dir),
        WORKTRAIN_FORBID_REAL_API="1",
        PYTHONPATH=str(ROOT),
        **extra,
    )
    return env


@dataclass
class Child:
    """A child process in its own process group, logging to a file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def spawn(cls, name: str, argv: Sequence[str], env: dict[str, str], log_dir: Path) -> Child:
        log = log_dir / f"{name}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                list(argv), cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return cls(name, process, log)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def wait_for_line(self, prefix: str, timeout: float = 30.0) -> str:
        """The first line of the log starting with `prefix` (e.g. the fake model's URL line)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self.tail()}")
            for line in self.tail(100_000).splitlines():
                if line.startswith(prefix):
                    return line
            time.sleep(0.05)
        raise RuntimeError(f"{self.name}: no line {prefix!r} in {timeout}s:\n{self.tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        if self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


# A tree whose fake model serves every bench instead of this one's: bench/retry_overhead.py
# measures two daemons against the same fake.
def from_daemon(module: str, name: str) -> Any:
    """`name` from `daemon.<module>`, in any layout: today's (`bus.session.registry`), the bus
    before its groups (`bus.registry`, issue 42), or the flat folder before issue 19
    (`registry`). retry_overhead.py runs this bench code against commits of each."""
    parts = module.split(".")
    layouts = [module, ".".join([parts[0], parts[-1]]), parts[-1]]
    for candidate in dict.fromkeys(layouts):
        try:
            return getattr(importlib.import_module(f"daemon.{candidate}"), name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"daemon.{module} in no layout known to bench/common.py")


FAKE_ROOT_ENV = "WORKTRAIN_BENCH_FAKE_ROOT"


def start_fake_model(log_dir: Path, env: dict[str, str], *args: str) -> tuple[Child, str]:
    """bench/fakeloop.py as a child; returns it and its base URL."""
    root = Path(os.environ.get(FAKE_ROOT_ENV) or ROOT)
    env = {**env, "PYTHONPATH": str(root)}
    child = Child.spawn(
        "fakemodel", [sys.executable, str(root / "bench" / "fakeloop.py"), "--port", "0", *args], env, log_dir
    )
    return child, child.wait_for_line("fake model listening on").split()[-1]


def proc_table() -> tuple[dict[int, int], dict[int, int]]:
    """(pid -> parent pid, pid -> CPU ticks) of every process."""
    parent: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(fields[1])
        ticks[int(entry)] = int(fields[11]) + int(fields[12])
    return parent, ticks


def descendants(roots: Sequence[int], parent: dict[int, int] | None = None) -> list[int]:
    """`roots` and every process below them."""
    parent = parent if parent is not None else proc_table()[0]
    wanted = set(roots)
    found = []
    for pid in parent:
        ancestor = pid
        while ancestor > 1 and ancestor not in wanted:
            ancestor = parent.get(ancestor, 0)
        if ancestor in wanted:
            found.append(pid)
    return found


def tree_cpu_seconds(roots: Sequence[int]) -> float:
    """CPU seconds (user + system) used so far by `roots` and all their descendants.

    Unlike throughput, this barely moves when something else loads the machine, so it is
    the steadier figure of the two on a shared 2-core box.
    """
    parent, ticks = proc_table()
    return sum(ticks.get(pid, 0) for pid in descendants(roots, parent)) / CLOCK_TICKS


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in KiB of one process; PSS shares each shared page among its users."""
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_line() -> str:
    return (
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()} {os.cpu_count()} cores "
        f"({cpu_model()}), Python {platform.python_version()}, load average {loadavg()}"
    )


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), nearest rank; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(math.ceil(p / 100 * len(ordered)) - 1, 0)
    return ordered[min(rank, len(ordered) - 1)]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def table(header: Sequence[str], rows: Sequence[Sequence[object]], right_from: int = 1) -> str:
    """A Markdown table; columns from `right_from` on are right-aligned."""
    align = ["---" if i < right_from else "---:" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


LOOP_WORKFLOW_ID = "bench-loop"


def write_loop_fixtures(tmp: Path, limits: dict[str, float]) -> tuple[Path, Path]:
    """A one-step workflow the fake model's loop rule walks (Read README.md each turn), and
    a workspace with that README: (workflows folder, workspace)."""
    workflows, workspace = tmp / "workflows", tmp / "ws"
    workflows.mkdir()
    workspace.mkdir()
    (workspace / "README.md").write_text("# Bench workspace\n\nA small file the agent reads every turn.\n")
    workflow = {
        "id": LOOP_WORKFLOW_ID,
        "name": "Bench loop",
        "steps": [{"id": "loop", "title": "Loop", "prompt": "Read README.md until you are told to stop."}],
        "limits": limits,
    }
    (workflows / f"{LOOP_WORKFLOW_ID}.json").write_text(json.dumps(workflow))
    return workflows, workspace


def new_bench_session(client: Any) -> str:
    """A queued session on the bus (direct bus benches: no worker ever runs it)."""
    Keys = from_daemon("bus.keys", "Keys")
    NewSession = from_daemon("bus.session.registry", "NewSession")
    SessionRegistry = from_daemon("bus.session.registry", "SessionRegistry")

    return SessionRegistry(client, Keys("wt")).create(
        NewSession(workflowId="bench", goal="bench", workspacePath="/tmp")
    )
