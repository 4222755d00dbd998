"""`worktrain up` says on its banner which sandbox layers agent commands run in (docs/security.md),
and loudly which are missing: finding L3, whose fallback to process-group isolation was said
only in a log file. The fallback is forced here (a test-only fault, honoured only with
WORKTRAIN_FAULTS=1) on a host that has every layer."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.cli.test_e2e import launch_up

pytestmark = pytest.mark.processes


def test_up_announces_a_forced_fallback_on_its_banner(tmp_path: Path) -> None:
    stack = next(
        gen := launch_up(
            tmp_path,
            ["--workers", "1", "--fake-latency", "0"],
            WORKTRAIN_FAULTS="1",
            WORKTRAIN_SANDBOX_FAULT="no-namespaces",
        )
    )
    try:
        banner = (tmp_path / "up.out").read_text()
        assert "  sandbox:    " in banner and "capabilities dropped" in banner, banner
        assert "WARNING:    agent commands run without pid_namespace: missing: forced" in banner, banner
        assert "WARNING:    agent commands run without network" in banner, banner
        assert "WARNING:    agent commands run without ipc_namespace" in banner, banner
        assert "seccomp on (" in banner, banner  # the filter needs no namespace (issue 29)
        stack["process"].send_signal(signal.SIGINT)
        assert stack["process"].wait(timeout=15) == 0
    finally:
        gen.close()
