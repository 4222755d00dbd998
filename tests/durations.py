"""Where a run's time went: every test's duration (setup + call + teardown) and CPU time in a
file, the slowest 20 printed at the end.

The file (test-durations.txt at the repository's root, or $WORKTRAIN_TEST_DURATIONS) lists
every test slowest first with its tier, then the time per module and per tier. CPU is what
the test's pytest process and the children it reaped (redis-server, worktrain processes and
theirs) spent during the test: on a loaded machine the wall time of a test grows, its CPU
much less, and the whole suite can be no faster than its CPU over the cores. A process is
counted when it is reaped: a session-wide one (the console tests' Chromium, the session's
redis-server) lands on the test that ended the session, not on those that used it. Under
pytest-xdist each worker measures its tests and the controlling process alone writes the
file. A test over SLOW_SECONDS needs a comment at the test saying why it cannot be faster;
the summary names each one.
"""

from __future__ import annotations

import os
import resource
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.tiers import TIERS

SHOWN = 20
SLOW_SECONDS = 30.0
CPU_PROPERTY = "cpu_seconds"


def cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuMeter:
    """In the process that runs the tests: each test's CPU, carried by its teardown report."""

    def __init__(self) -> None:
        self.started = 0.0

    def pytest_runtest_logstart(self) -> None:
        self.started = cpu_seconds()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, call: pytest.CallInfo[None]) -> Iterator[None]:
        report: pytest.TestReport = yield  # type: ignore[misc]
        if call.when == "teardown":
            report.user_properties.append((CPU_PROPERTY, cpu_seconds() - self.started))
        return report  # type: ignore[return-value]


class Durations:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.started = time.monotonic()
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = {}
        self.tiers: dict[str, str] = {}
        self.busy: dict[str, float] = defaultdict(float)  # per xdist worker: seconds in tests
        self.done: dict[str, float] = {}  # per xdist worker: when its last test ended

    @property
    def path(self) -> Path:
        return Path(os.environ.get("WORKTRAIN_TEST_DURATIONS") or self.config.rootpath / "test-durations.txt")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        node = getattr(report, "node", None)  # pytest-xdist: the worker that ran it
        worker = str(getattr(getattr(node, "gateway", None), "id", "main"))
        self.busy[worker] += report.duration
        self.done[worker] = time.monotonic() - self.started
        for name, value in report.user_properties:
            if name == CPU_PROPERTY:
                self.cpu[report.nodeid] = float(value)  # type: ignore[arg-type]
        tier = next((k for k in report.keywords if k in TIERS), None)
        if tier is not None:
            self.tiers[report.nodeid] = tier

    def line(self, nodeid: str, seconds: float) -> str:
        return f"{seconds:8.2f}s {self.cpu.get(nodeid, 0.0):7.2f}s {self.tiers.get(nodeid, '?'):<9} {nodeid}"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.seconds:
            return
        ranked = sorted(self.seconds.items(), key=lambda kv: kv[1], reverse=True)
        wall = time.monotonic() - self.started
        self.write(ranked, wall)
        write = terminalreporter.write_line
        terminalreporter.section(f"slowest {min(SHOWN, len(ranked))} tests (setup + call + teardown)")
        write(f"{'wall':>9} {'cpu':>8} {'tier':<9} test")
        for nodeid, seconds in ranked[:SHOWN]:
            flag = "  <- over 30 s: say why at the test" if seconds > SLOW_SECONDS else ""
            write(self.line(nodeid, seconds) + flag)
        total, cpu = sum(self.seconds.values()), sum(self.cpu.values())
        write(
            f"{len(ranked)} tests: {total:.0f} s of test time, {cpu:.0f} s of CPU, in {wall:.0f} s; "
            f"all in {self.path}"
        )
        write(self.workers())

    def workers(self) -> str:
        """Each worker's share: an early finish is a worker idle while the other runs on."""
        shares = [
            f"{name} {self.busy[name]:.0f} s in tests, done at {self.done[name]:.0f} s"
            for name in sorted(self.busy)
        ]
        return "workers: " + "; ".join(shares)

    def write(self, ranked: list[tuple[str, float]], wall: float) -> None:
        per_module: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        per_tier: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        for nodeid, seconds in ranked:
            for bucket in (per_module[nodeid.split("::", 1)[0]], per_tier[self.tiers.get(nodeid, "?")]):
                bucket[0] += seconds
                bucket[1] += self.cpu.get(nodeid, 0.0)
        lines = [
            f"# {len(ranked)} tests in {wall:.1f} s; wall and CPU seconds of setup + call + teardown",
            f"# {self.workers()}",
            "",
        ]
        lines += [self.line(n, s) for n, s in ranked]
        for title, buckets in (("module", per_module), ("tier", per_tier)):
            lines += ["", f"# per {title}: wall, CPU"]
            for name, (seconds, cpu) in sorted(buckets.items(), key=lambda kv: kv[1][0], reverse=True):
                lines.append(f"{seconds:8.2f}s {cpu:7.2f}s {name}")
        self.path.write_text("\n".join(lines) + "\n")


def register(config: pytest.Config) -> None:
    config.pluginmanager.register(CpuMeter(), "worktrain-cpu-meter")
    if not hasattr(config, "workerinput"):  # an xdist worker: its reports go to the controller
        config.pluginmanager.register(Durations(config), "worktrain-durations")
