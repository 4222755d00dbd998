"""`kill -9` of `worktrain up` takes its whole tree with it: Redis, the fake model, web (and
the web server's workers), the worker pool (and its RQ workers). Each child of `up` gets a
parent-death signal (cli/procs.py), each grandchild one from its own parent
(daemon/host/lifeline.py): nothing is left running, nothing keeps listening. The worker
tier's warm shutdown does not wait for the Redis that died with `up` (worker/leaving.py)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from cli.procs import descendants, read_stat, signal_all
from tests.cli.test_e2e import launch_up
from tests.leftovers import cmdline, listening, wait_gone

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def test_kill_9_of_up_leaves_no_process_and_no_listener(tmp_path: Path) -> None:
    for stack in launch_up(tmp_path, ["--workers", "1", "--fake-latency", "0"]):
        process = stack["process"]
        # redis, fake model, web + its 2 workers, the worker tier: its pool, RQ worker and the
        # RQ worker's scheduler (whose last writes would retry the Redis gone with `up`)
        deadline = time.monotonic() + 30
        while len(tree := descendants(process.pid)) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        names = [cmdline(p.pid) for p in tree]
        assert any("redis-server" in n for n in names) and any("daemon.fakemodel" in n for n in names), names
        assert sum(" worker " in f"{n} " for n in names) >= 3 and any(" web " in n for n in names), names
        try:
            process.kill()
            process.wait()
            left = wait_gone(tree, 15)
            # name each survivor (its command line, its state and parent): a bare pid said nothing
            # when this failed in a full run (issue 33)
            assert left == [], f"outlived `up`: {[(pid, cmdline(pid), read_stat(pid)) for pid in left]}"
            deadline = time.monotonic() + 10
            while listening(stack["port"]) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not listening(stack["port"])
        finally:
            signal_all(tree, signal.SIGKILL)
