"""Each benchmark command's core, with tiny sizes, so the benches do not rot (docs/benchmarks.md).

These check that every command runs end to end and prints its table, not the figures.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bus_cost  # noqa: E402
import compaction  # noqa: E402
import growth  # noqa: E402
import idle_cost  # noqa: E402
import interrupt_latency  # noqa: E402
import metrics_cost  # noqa: E402
import model_call  # noqa: E402
import model_cap  # noqa: E402
import retry_overhead  # noqa: E402
import scale  # noqa: E402
import steer_ingress  # noqa: E402
import turn_overhead  # noqa: E402

pytestmark = pytest.mark.processes


def test_bus_cost_counts_one_round_trip_each(capsys: pytest.CaptureFixture[str]) -> None:
    bus_cost.main(["--seconds", "0.05", "--runs", "1"])
    out = capsys.readouterr().out
    assert "| accept (SteerBus.accept) | 1 | 1 |" in out
    assert "| turn end, 100 pending (drains 100) | 1 | 1 |" in out and "| heartbeat | 1 | 1 |" in out
    assert "RPUSH (raw, same JSON)" in out


def test_growth_prints_accept_and_drain_tables(capsys: pytest.CaptureFixture[str]) -> None:
    growth.main(["--max-pending", "100", "--journal", "500", "--samples", "5"])
    out = capsys.readouterr().out
    assert "| 100 pending (journal 100) |" in out and "0 pending, journal 5" in out
    assert "| 100 |" in out


def test_turn_overhead_runs_a_daemon_session_and_the_bare_loop(capsys: pytest.CaptureFixture[str]) -> None:
    [result] = turn_overhead.main(["--turns", "4", "--runs", "1"])
    assert len(result.per_turn_overhead) == 3 and result.daemon_wall > 0 and result.bare_wall > 0
    assert "| **median** |" in capsys.readouterr().out


@pytest.mark.e2e
def test_steer_ingress_measures_closed_and_open_loop(capsys: pytest.CaptureFixture[str]) -> None:
    steer_ingress.main(["--only", "web", "--runs", "1", "--seconds", "0.3", "--warmup", "0.1"])
    out = capsys.readouterr().out
    for label in ("| steer web |", "| readyz web |", "| healthz web |", "| redis EVALSHA accept |"):
        assert label in out
    assert "| steer web @ " in out


def test_idle_cost_counts_both_kinds_of_loops(capsys: pytest.CaptureFixture[str]) -> None:
    idle_cost.main(["--sessions", "3", "--seconds", "1", "--settle", "0.5"])
    out = capsys.readouterr().out
    assert "| per session | 3 |" in out and "| shared | 3 |" in out
    assert out.count("3/3") == 2  # every wait woke for its steer


@pytest.mark.e2e
def test_scale_checks_exactly_once_on_a_tiny_stack(capsys: pytest.CaptureFixture[str]) -> None:
    scale.main(["--sessions", "2", "--seconds", "2", "--interval", "1", "--latency", "0.1"])
    out = capsys.readouterr().out
    assert "result: all checks passed" in out or "result: steer-to-model p99 above 50 ms" in out
    assert "0 missing, 0 more than once" in out and "2 of 2 sessions" in out


def test_compaction_times_one_and_follows_a_session(capsys: pytest.CaptureFixture[str]) -> None:
    compaction.main(["--repeat", "1", "--history", "30", "--turns", "30", "--window", "8000"])
    out = capsys.readouterr().out
    assert "| 30 turns, window 8,000 |" in out and "| 30 |" in out and "uncompacted" in out


def test_model_cap_measures_throughput_and_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    model_cap.main(["--sessions", "3", "--cap", "1", "--latency", "0.05", "--turns", "2"])
    out = capsys.readouterr().out
    assert "| 3 sessions, cap 1 | 6 |" in out and "| acquire, a slot free | 1 |" in out
    assert "| release | 1 |" in out


@pytest.mark.e2e
def test_retry_overhead_runs_both_trees(capsys: pytest.CaptureFixture[str]) -> None:
    retry_overhead.main(["--pairs", "1", "--turns", "4"])
    assert "| **this / base** |" in capsys.readouterr().out


def test_interrupt_latency_measures_each_kind_of_held_call(capsys: pytest.CaptureFixture[str]) -> None:
    interrupt_latency.main(["--sessions", "1", "--lease", "1.5"])
    out = capsys.readouterr().out
    for label in ("| before headers | 1 |", "| mid-stream | 1 |", "| bash | 1 |", "heartbeat only"):
        assert label in out


def test_model_call_compares_the_four_ways_and_checks_the_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    model_call.main(
        [
            "--rounds",
            "1",
            "--calls",
            "0.05",
            "--tool-kb",
            "2",
            "--text-deltas",
            "20",
            "--history-kb",
            "3",
            "--chunk",
            "0",
        ]
    )
    out = capsys.readouterr().out
    assert "| short text + one small tool_use (2 KB of SSE) | 2 |" in out and "| 20 text deltas (" in out
    assert "a 2 KB tool input in 10-character deltas" in out and "in one delta" in out
    assert "| short reply, 3 KB history (same bytes) |" in out


def test_metrics_cost_compares_with_and_without(capsys: pytest.CaptureFixture[str]) -> None:
    metrics_cost.main(["--rounds", "2", "--steers", "20"])
    out = capsys.readouterr().out
    assert "| without metrics |" in out and "| with metrics |" in out and "recording calls alone" in out
