"""bench/sandbox_overhead.py runs end to end and prints its table (not the figures)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import sandbox_overhead  # noqa: E402

pytestmark = pytest.mark.processes


def test_sandbox_overhead_prints_both_rows(capsys: pytest.CaptureFixture[str]) -> None:
    sandbox_overhead.main(["--rounds", "2"])
    out = capsys.readouterr().out
    assert "| pid namespace only (before) |" in out and "| every layer (now) |" in out
    assert "ratio of the medians:" in out
