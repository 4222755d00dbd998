"""Where a run's time went: every test's duration (setup + call + teardown) in a file, the
slowest 20 printed at the end.

The file (test-durations.txt at the repository's root, or $WORKTRAIN_TEST_DURATIONS) lists
every test slowest first with its tier, then the time per module and per tier. Under
pytest-xdist the reports reach the controlling process, which alone writes it. A test over
SLOW_SECONDS needs a comment at the test saying why it cannot be faster; the summary names
each one.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.tiers import TIERS

SHOWN = 20
SLOW_SECONDS = 30.0


class Durations:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)
        self.tiers: dict[str, str] = {}

    @property
    def path(self) -> Path:
        return Path(os.environ.get("WORKTRAIN_TEST_DURATIONS") or self.config.rootpath / "test-durations.txt")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        tier = next((k for k in report.keywords if k in TIERS), None)
        if tier is not None:
            self.tiers[report.nodeid] = tier

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        ranked = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)
        wall = time.monotonic() - self.started
        self.write(ranked, wall)
        write = terminalreporter.write_line
        terminalreporter.section(f"slowest {min(SHOWN, len(ranked))} tests (setup + call + teardown)")
        for nodeid, seconds in ranked[:SHOWN]:
            flag = "  <- over 30 s: say why at the test" if seconds > SLOW_SECONDS else ""
            write(f"{seconds:8.2f}s {self.tiers.get(nodeid, '?'):<9} {nodeid}{flag}")
        total = sum(self.seconds.values())
        write(f"{len(ranked)} tests, {total:.0f} s of test time in {wall:.0f} s wall; all in {self.path}")

    def write(self, ranked: list[tuple[str, float]], wall: float) -> None:
        per_module: dict[str, float] = defaultdict(float)
        per_tier: dict[str, float] = defaultdict(float)
        for nodeid, seconds in ranked:
            per_module[nodeid.split("::", 1)[0]] += seconds
            per_tier[self.tiers.get(nodeid, "?")] += seconds
        lines = [f"# {len(ranked)} tests in {wall:.1f} s wall; seconds are setup + call + teardown", ""]
        lines += [f"{s:9.3f} {self.tiers.get(n, '?'):<9} {n}" for n, s in ranked]
        lines += ["", "# per module"]
        lines += [f"{s:9.3f} {m}" for m, s in sorted(per_module.items(), key=lambda kv: kv[1], reverse=True)]
        lines += ["", "# per tier"]
        lines += [f"{s:9.3f} {t}" for t, s in sorted(per_tier.items(), key=lambda kv: kv[1], reverse=True)]
        self.path.write_text("\n".join(lines) + "\n")


def register(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # an xdist worker: its reports go to the controller
        config.pluginmanager.register(Durations(config), "worktrain-durations")
