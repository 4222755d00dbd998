"""bench/scale.py with the worker processes' CPU by phase (bench/phases.py) and Redis's work,
per model call in the steering window.

    .venv/bin/python bench/scale_phases.py <bench/scale.py arguments>

The same run as bench/scale.py (its report printed as it is), plus: every `worktrain worker`
process wraps the phases of bench/phases.py (bench/phases_site/sitecustomize.py) and reports
its ledger at the start and the end of the steering window; Redis's `INFO commandstats` is
reset at the start and read at the end. Printed per model call made in the window: each
phase's CPU summed over the worker processes, the Redis round trips each phase made, and
Redis's calls and microseconds per command. CPU time and commandstats hold on a loaded
machine far better than latencies do (bench/turn_cpu.py); the wrappers cost ~1-2 µs a call.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale
from common import ROOT, table


class Probe:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="wt-phases-"))
        self.redis_url = ""
        self.calls = 0
        self.redis: dict[str, Any] = {}

    def take(self, label: str) -> None:
        (self.folder / f"take.{label}").touch()

    def ledgers(self, label: str) -> dict[int, dict[str, dict[str, float]]]:
        found = {}
        for path in self.folder.glob(f"*.{label}.json"):
            found[int(path.name.split(".")[0])] = json.loads(path.read_text())
        return found


def main() -> None:
    import redis

    probe = Probe()
    os.environ["WT_BENCH_PHASES_DIR"] = str(probe.folder)
    site = ROOT / "bench" / "phases_site"
    original_env = scale.bench_env

    def bench_env(redis_url: str, data_dir: Path, **extra: str) -> dict[str, str]:
        probe.redis_url = redis_url
        env = original_env(redis_url, data_dir, **extra)
        env["PYTHONPATH"] = f"{site}{os.pathsep}{env['PYTHONPATH']}"
        return env

    scale.bench_env = bench_env  # type: ignore[assignment]
    coordinator = scale.coordinator

    def windowed(*args: Any, **kwargs: Any) -> Any:
        client = redis.Redis.from_url(probe.redis_url, decode_responses=True)
        probe.take("start")
        client.config_resetstat()
        try:
            return coordinator(*args, **kwargs)
        finally:
            probe.redis = client.info("commandstats")
            probe.take("end")
            client.close()
            time.sleep(1.0)

    scale.coordinator = windowed  # type: ignore[assignment]
    report = scale.Report.cpu_per_call

    def counted(self: Any, cpu: dict[str, float], calls: int, window: float, latency: float) -> None:
        probe.calls = calls
        report(self, cpu, calls, window, latency)

    scale.Report.cpu_per_call = counted  # type: ignore[method-assign]
    scale.main(sys.argv[1:])
    print_phases(probe)


def print_phases(probe: Probe) -> None:
    start, end = probe.ledgers("start"), probe.ledgers("end")
    calls = max(probe.calls, 1)
    cpu: Counter[str] = Counter()
    trips: Counter[str] = Counter()
    process = 0.0
    for pid, after in end.items():
        before = start.get(pid, {"cpu": {}, "trips": {}, "process_cpu": {"": 0.0}})
        for phase, seconds in after["cpu"].items():
            cpu[phase] += seconds - before["cpu"].get(phase, 0.0)
        for phase, n in after["trips"].items():
            trips[phase] += n - before["trips"].get(phase, 0)
        process += after["process_cpu"][""] - before["process_cpu"][""]
    rows: list[list[object]] = [
        [phase, f"{seconds / calls * 1e6:.0f}", f"{trips[phase] / calls:.2f}"]
        for phase, seconds in cpu.most_common()
    ]
    rows += [[phase, "", f"{n / calls:.2f}"] for phase, n in trips.most_common() if phase not in cpu]
    attributed = sum(cpu.values())
    rows.append(["other (not in a phase)", f"{(process - attributed) / calls * 1e6:.0f}", ""])
    rows.append(
        [
            "**worker processes, all**",
            f"**{process / calls * 1e6:.0f}**",
            f"**{sum(trips.values()) / calls:.2f}**",
        ]
    )
    print(f"\nWorker processes ({len(end)}), per model call in the window ({probe.calls} calls):\n")
    print(table(["phase", "CPU µs per call", "Redis round trips per call"], rows))
    stats = {k.removeprefix("cmdstat_"): v for k, v in probe.redis.items()}
    stats.pop("config|resetstat", None)
    ordered = sorted(stats.items(), key=lambda kv: -int(kv[1]["usec"]))
    redis_rows = [
        [name, f"{int(v['calls']) / calls:.2f}", f"{int(v['usec']) / calls:.1f}"] for name, v in ordered[:15]
    ]
    evalsha = int(stats.get("evalsha", {"usec": 0})["usec"])
    redis_rows.append(
        ["**the scripts (`evalsha`, their own calls included)**", "", f"**{evalsha / calls:.1f}**"]
    )
    print(
        "\n"
        + table(
            ["Redis command (INFO commandstats, the window)", "calls per model call", "µs per model call"],
            redis_rows,
        )
    )


if __name__ == "__main__":
    main()
