"""bench/snapshot_cost.py runs end to end and prints its table (not the figures)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import snapshot_cost  # noqa: E402

pytestmark = pytest.mark.processes


def test_snapshot_cost_prints_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    snapshot_cost.main(["--files", "200", "--turns", "2"])
    out = capsys.readouterr().out
    assert "| snapshot (in the box) |" in out and "| the box alone (`true`) |" in out
    assert "objects a snapshot adds: median" in out
