"""A tier stopped while it starts exits 0, as `docker compose stop` expects of a stop, and
leaves nothing behind (cli/startstop.py, worker/pool.py `SessionPool`). Before, a worker
asked to stop in the seconds it takes to start died of the signal (-15): the cause of a red
CI run (`test_compose_commands_run_a_steered_session`'s second worker replica).

The signal is sent at points the process itself shows: once it has named itself (its
handlers are in: they come first), and once its RQ pool says it starts (the window in which
the pool forks its workers, before RQ's handlers)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.procs import descendants
from cli.startstop import stops_cleanly_while_starting
from daemon.host import startstop
from daemon.host.embedded_redis import RedisServer, free_port
from worker import startstop as worker_startstop
from worker.startstop import PoolStopping, StopsAskedBeforeHandlers

from .conftest import FIXTURE_WORKFLOWS, ROOT, TOKEN
from .test_process_names import comm, stop_or_kill

pytestmark = [pytest.mark.unit, pytest.mark.timeout(90)]

STOPPED_WHILE_STARTING = "SIGTERM while starting: stopped"


def start_tier(argv: list[str], redis_url: str, tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("WORKTRAIN_", "REDIS_"))},
        "REDIS_URL": redis_url,
        "WORKTRAIN_API_TOKEN": TOKEN,  # a secret: `seal` re-executes the process first
        "WORKTRAIN_DATA_DIR": str(tmp_path / "data"),
        "WORKTRAIN_WORKFLOWS_DIR": str(FIXTURE_WORKFLOWS),
        "WORKTRAIN_FORBID_REAL_API": "1",
        "HOME": str(tmp_path),
    }
    log = tmp_path / f"{argv[0]}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "cli", *argv],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    return process, log


def wait_until(process: subprocess.Popen[bytes], log: Path, ready: object, what: str) -> None:
    deadline = time.monotonic() + 60
    while not ready():  # type: ignore[operator]
        assert process.poll() is None, log.read_text(errors="replace")
        assert time.monotonic() < deadline, f"no {what} in 60 s: {log.read_text(errors='replace')}"
        time.sleep(0.005)


def named(process: subprocess.Popen[bytes], prefix: str) -> bool:
    try:
        return comm(process.pid).startswith(prefix)
    except OSError:
        return False


def stop_and_wait(process: subprocess.Popen[bytes], log: Path) -> str:
    tree = [p.pid for p in descendants(process.pid)]
    stop_or_kill(process, log)  # SIGTERM, once, as compose sends it; kills the tree past 30 s
    text = log.read_text(errors="replace")
    assert process.returncode == 0, f"exit {process.returncode}: {text}"
    time.sleep(0.2)
    left = [pid for pid in tree if Path(f"/proc/{pid}").exists() and "Z" not in stat_state(pid)]
    assert not left, f"processes left behind: {left}"
    return text


def stat_state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.mark.processes
def test_a_worker_stopped_while_it_sets_up_exits_0(redis_server: RedisServer, tmp_path: Path) -> None:
    process, log = start_tier(["worker"], redis_server.url, tmp_path)
    wait_until(process, log, lambda: named(process, "worktrain worke"), "process name")
    text = stop_and_wait(process, log)
    assert STOPPED_WHILE_STARTING in text  # the probe and preloading take seconds after naming
    assert "Starting worker pool" not in text  # it took no job: no pool was started


@pytest.mark.processes
def test_a_worker_stopped_while_its_pool_forks_exits_0(redis_server: RedisServer, tmp_path: Path) -> None:
    process, log = start_tier(["worker", "--processes", "2"], redis_server.url, tmp_path)
    wait_until(process, log, lambda: "Starting worker pool" in log.read_text(errors="replace"), "pool")
    text = stop_and_wait(process, log)
    assert "Received SIGINT/SIGTERM, shutting down" in text  # RQ's warm shutdown carried it out


@pytest.mark.processes
def test_the_web_stopped_while_it_starts_exits_0(redis_server: RedisServer, tmp_path: Path) -> None:
    argv = ["web", "--bind", "127.0.0.1", "--port", str(free_port()), "--workers", "1"]
    process, log = start_tier(argv, redis_server.url, tmp_path)
    wait_until(process, log, lambda: named(process, "worktrain web"), "process name")
    stop_and_wait(process, log)  # it may have reached granian's handlers by then: 0 either way


@pytest.fixture
def own_signals(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The in-process tests below install the start's handlers in this test process: they get
    a fresh flag, and the handlers are put back after."""
    monkeypatch.setattr(startstop, "_asked", [])
    saved = {signum: signal.getsignal(signum) for signum in startstop.STOP_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_stop_that_python_wrapped_on_the_way_is_still_a_stop(
    own_signals: None, capsys: pytest.CaptureFixture[str]
) -> None:
    class SetsAName:  # Python wraps what __set_name__ raises in a RuntimeError (seen in CI's logs)
        def __set_name__(self, owner: type, name: str) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler runs here

    with stops_cleanly_while_starting("worker"):
        type("Owner", (), {"attribute": SetsAName()})
        raise AssertionError("the start went on after SIGTERM")
    assert "worktrain worker: SIGTERM while starting: stopped" in capsys.readouterr().err


def test_a_stop_caught_on_the_way_ends_the_start_before_the_server(own_signals: None) -> None:
    reached_server = False
    with stops_cleanly_while_starting("web"):
        with contextlib.suppress(startstop.StoppedWhileStarting):  # as a __del__ would drop it
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        startstop.raise_if_stop_asked()  # what SessionPool.start and web.serve call first
        reached_server = True
    assert not reached_server


def test_without_a_stop_the_starts_own_errors_come_out_as_they_are(own_signals: None) -> None:
    with pytest.raises(ValueError, match="bad setting"), stops_cleanly_while_starting("worker"):
        raise ValueError("bad setting")


@pytest.mark.processes
def test_a_pool_that_stops_after_the_fork_is_seen_stopping_by_its_worker() -> None:
    """The mark lives in memory the fork shares, not copies: a worker forked before its pool
    stopped reads the stop (CPython may drop the SIGINT that came with it, worker/startstop.py)."""
    stopping = PoolStopping()
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: reads the mark once its pool has set it after the fork
        os.close(go_write)
        os.read(go_read, 1)
        os._exit(0 if stopping.is_set() else 1)
    os.close(go_read)
    stopping.set()
    os.write(go_write, b"x")
    os.close(go_write)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the worker did not see its pool stopping"


class HandlersIn:
    def _install_signal_handlers(self) -> None:
        return None  # RQ's, in a real worker


class Worker(StopsAskedBeforeHandlers, HandlersIn):
    name = "w"
    _stop_requested = False


@pytest.mark.parametrize("pool_stops", [True, False])
def test_a_worker_whose_pool_is_stopping_stops_before_it_dequeues(
    pool_stops: bool, own_signals: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    stopping = PoolStopping()
    if pool_stops:
        stopping.set()
    monkeypatch.setattr(worker_startstop, "_stopping", stopping)
    worker = Worker()
    worker._install_signal_handlers()  # what RQ's `work()` does before its first dequeue
    assert worker._stop_requested is pool_stops
