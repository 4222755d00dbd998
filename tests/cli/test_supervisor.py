"""The `worktrain up` supervisor's parts: the run lock, process trees, a child that dies."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cli import procs
from cli.client import default_data_dir, running_up_url
from cli.embedded import redis_cli_line
from cli.restartpolicy import RestartPolicy
from cli.runlock import AlreadyRunning, RunLock
from cli.startup import StackFailed, port_in_use
from cli.supervisor import StackOptions, Supervisor, local_host
from cli.up import use_fake_model
from daemon.host.embedded_redis import free_port
from tests.cli.conftest import Cli

pytestmark = pytest.mark.unit


def test_a_second_lock_on_the_same_data_dir_reports_the_first(tmp_path):
    first = RunLock(tmp_path)
    first.acquire()
    first.write_state({"pid": 4242, "apiUrl": "http://127.0.0.1:3456"})
    with pytest.raises(AlreadyRunning) as caught:
        RunLock(tmp_path).acquire()
    assert (
        str(caught.value)
        == "WorkTrain is already running on this data dir (pid 4242, API http://127.0.0.1:3456)"
    )
    first.release()
    assert not (tmp_path / "up.json").exists()
    again = RunLock(tmp_path)
    again.acquire()  # released: free again
    again.release()


@pytest.mark.processes
def test_the_lock_dies_with_its_process(tmp_path):
    code = (
        "import pathlib, time; from cli.runlock import RunLock; "
        f"RunLock(pathlib.Path({str(tmp_path)!r})).acquire(); print('held', flush=True); time.sleep(60)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    with pytest.raises(AlreadyRunning):
        RunLock(tmp_path).acquire()
    holder.kill()  # no clean-up at all: the kernel drops the flock
    holder.wait()
    lock = RunLock(tmp_path)
    lock.acquire()
    lock.release()


SUBREAPER_PROBE = """
import json, os, subprocess, sys, time
from cli import procs
assert procs.become_subreaper()
# A child that starts a grandchild in a new session and exits at once: the orphan is
# re-parented to us (the subreaper), not to init, so it is still in our tree.
subprocess.run(["sh", "-c", "setsid sleep 30 & echo $!"], stdout=open("pid.txt", "w"), check=True)
time.sleep(0.2)
orphan = int(open("pid.txt").read())
tree = [p.pid for p in procs.descendants(os.getpid())]
procs.signal_all(procs.descendants(os.getpid()), procs.signal.SIGKILL)
time.sleep(0.2)
procs.reap_orphans(set())
print(json.dumps({"orphan": orphan, "tree": tree, "after": [p.pid for p in procs.descendants(os.getpid())]}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="subreaper and /proc are Linux")
@pytest.mark.processes
def test_an_orphaned_grandchild_stays_in_the_subreapers_tree(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", SUBREAPER_PROBE], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    result = json.loads(out)
    assert result["orphan"] in result["tree"]
    assert result["after"] == []
    assert not procs.Proc(result["orphan"], 0).alive()


@pytest.mark.processes
def test_descendants_lists_children_and_grandchildren_and_skips_excluded():
    child = subprocess.Popen(["sh", "-c", "sleep 30 & sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 5
        while len(procs.descendants(child.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        grandchildren = procs.descendants(child.pid)
        assert len(grandchildren) == 2 and all(p.alive() for p in grandchildren)
        mine = procs.descendants(os.getpid())
        assert {p.pid for p in grandchildren} <= {p.pid for p in mine}
        assert procs.descendants(os.getpid(), exclude=frozenset({child.pid})) == [
            p for p in mine if p.pid != child.pid and p not in grandchildren
        ]
    finally:
        procs.signal_all(procs.descendants(child.pid), procs.signal.SIGKILL)
        child.kill()
        child.wait()


def test_redis_cli_line():
    line = redis_cli_line("redis://127.0.0.1:6390/0")
    assert line.endswith("redis-cli -h 127.0.0.1 -p 6390")
    assert redis_cli_line("redis://h:1/2").endswith(" -h h -p 1 -n 2")
    assert "pw" not in redis_cli_line("redis://:pw@h:1/0")  # a password is never printed
    with_file = redis_cli_line("redis://127.0.0.1:6390/0", Path("/data/redis/password"))
    assert with_file.startswith('REDISCLI_AUTH="$(cat /data/redis/password)" ')


@pytest.mark.parametrize(
    ("model", "key", "fake"),
    [("auto", None, True), ("auto", "sk-test", False), ("fake", "sk-test", True), ("anthropic", None, False)],
)
def test_the_fake_model_runs_when_there_is_no_api_key_or_when_asked(model, key, fake):
    assert use_fake_model(model, key is not None) is fake


def test_up_refuses_a_public_bind_without_a_token():
    result = Cli("http://127.0.0.1:9")("up", "--bind", "0.0.0.0", WORKTRAIN_API_TOKEN=None)
    assert result.exit_code == 2 and "WORKTRAIN_API_TOKEN" in result.stderr


class StubSupervisor:
    """Stands in for cli.supervisor.Supervisor: records the options, starts nothing."""

    seen: list[StackOptions] = []

    def __init__(self, options: StackOptions, say: object) -> None:
        self.seen.append(options)
        self.children: list[object] = []
        self.redis = None

    def install_signal_handlers(self) -> None: ...

    def adopt_orphans(self) -> None: ...

    def start(self) -> dict[str, object]:
        raise StackFailed("stub: nothing started")

    def shutdown(self) -> None: ...


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]"])
@pytest.mark.processes
def test_up_takes_every_loopback_bind_without_a_token_as_web_does(monkeypatch, tmp_path, bind):
    from daemon.host.bind import check_bind

    check_bind(bind, None)  # what `worktrain web` checks: it would listen there
    monkeypatch.setattr("cli.supervisor.Supervisor", StubSupervisor)
    StubSupervisor.seen.clear()
    result = Cli("http://127.0.0.1:9")("up", "--bind", bind, WORKTRAIN_API_TOKEN=None, HOME=str(tmp_path))
    assert result.exit_code == 1 and "stub: nothing started" in result.stderr, result.stderr
    normalized = {"localhost": "127.0.0.1", "[::1]": "::1"}.get(bind, bind)  # as web binds it
    assert [options.bind for options in StubSupervisor.seen] == [normalized]


@pytest.mark.parametrize(
    ("bind", "host"),
    [("127.0.0.2", "127.0.0.2"), ("localhost", "localhost"), ("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"),
     ("[::]", "127.0.0.1"), ("::1", "[::1]"), ("[::1]", "[::1]")],
)  # fmt: skip
def test_the_api_url_of_a_bind_address(bind, host):
    assert local_host(bind) == host


@pytest.mark.redis
def test_port_in_use_on_ipv6_loopback():
    import socket

    try:
        listener = socket.socket(socket.AF_INET6)
        listener.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with listener:
        listener.listen()
        port = listener.getsockname()[1]
        assert port_in_use("[::1]", port) and port_in_use("::1", port)
    free = free_port()
    assert not port_in_use("[::1]", free) and not port_in_use("::1", free)
    assert not port_in_use("127.0.0.1", free)


@pytest.mark.processes
def test_up_and_the_client_commands_find_the_same_data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WORKTRAIN_DATA_DIR", "~/wt")  # a literal ~, as in a .env file
    assert default_data_dir() == tmp_path / "wt"
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / "up.json").write_text(json.dumps({"pid": os.getpid(), "apiUrl": "http://h:1"}))
    assert running_up_url() == "http://h:1"
    monkeypatch.setattr("cli.supervisor.Supervisor", StubSupervisor)
    StubSupervisor.seen.clear()
    assert Cli("http://127.0.0.1:9")("up", WORKTRAIN_API_TOKEN=None).exit_code == 1
    assert [options.data_dir for options in StubSupervisor.seen] == [tmp_path / "wt"]


class DyingWorker(Supervisor):
    """A stack whose `worker` exits with code 3 at once, or once the file `trigger` exists.

    It prints a digest of the secrets it was handed (daemon.host.secrets pipe) first."""

    trigger: Path | None = None

    def worker_command(self) -> list[str]:
        wait = f"while not os.path.exists({str(self.trigger)!r}): time.sleep(0.05)\n" if self.trigger else ""
        code = (
            "import hashlib, json, os, sys, time\n"
            "from daemon.host.secrets import seal\n"
            "held = json.dumps(dict(seal('worker')), sort_keys=True).encode()\n"
            "print('secrets', hashlib.sha256(held).hexdigest(), flush=True)\n"
            f"print('worker giving up', flush=True)\n{wait}sys.exit(3)"
        )
        return [sys.executable, "-c", code]


def stack_tree(supervisor: Supervisor) -> list[procs.Proc]:
    """The supervisor's children and everything below them (not pytest's other children)."""
    tree = []
    for child in supervisor.children:
        stat = procs.read_stat(child.process.pid)
        assert stat is not None
        tree += [procs.Proc(child.process.pid, stat[2]), *procs.descendants(child.process.pid)]
    return tree


API_KEY = "sk-ant-restart-test-" + "0a1b2c3d4e" * 3


def stack_options(tmp_path: Path, redis_url: str | None) -> StackOptions:
    return StackOptions(
        data_dir=tmp_path / "data",
        port=free_port(),
        redis_url=redis_url,
        redis_port=None if redis_url else free_port(),
        workers=1,
        secrets={"ANTHROPIC_API_KEY": API_KEY},
    )


def run_stack(supervisor: Supervisor) -> int:
    """What `worktrain up` does with a supervisor: start, watch; 1 if either failed."""
    try:
        supervisor.start()
        return supervisor.watch()
    except StackFailed as exc:
        supervisor.say(f"worktrain: {exc}")
        return 1
    finally:
        supervisor.shutdown()


@pytest.mark.processes
def test_a_worker_crashing_at_start_every_time_is_given_up_on_within_the_window(tmp_path, redis_server):
    said: list[str] = []
    policy = RestartPolicy(first_delay=0.1)  # the default's 0.5 s start: test_restartpolicy.py
    options = stack_options(tmp_path, redis_server.url)
    supervisor = DyingWorker(options, say=said.append, restart_policy=policy)
    started = time.monotonic()
    assert run_stack(supervisor) == 1
    elapsed = time.monotonic() - started
    text = "\n".join(said)
    # Restarts after 0.1, 0.2, 0.4, 0.8 s; the fifth crash within 60 s gives up.
    assert re.findall(r"restarting worker in (\S+)s \(crash (\d)", text) == [
        ("0.1", "1"), ("0.2", "2"), ("0.4", "3"), ("0.8", "4")
    ], text  # fmt: skip
    assert len(re.findall(r"worker \(pid \d+\) exited with code 3 after", text)) == 5, text
    assert "worker crashed 5 times within 60s: giving up" in text
    assert "--- last lines of worker.log ---" in text and "worker giving up" in text
    assert 1.5 <= elapsed < 60, elapsed
    # Every incarnation got the same secrets, by pipe, and appended to the same log.
    log = (tmp_path / "data" / "logs" / "worker.log").read_text()
    digests = re.findall(r"^secrets (\w+)$", log, re.M)
    expected = hashlib.sha256(json.dumps({"ANTHROPIC_API_KEY": API_KEY}).encode()).hexdigest()
    assert digests == [expected] * 5, log
    assert [int(n) for n in re.findall(r"worker restarted \(restart (\d)\)", log)] == [1, 2, 3, 4]
    assert API_KEY not in text + log
    assert [c for c in supervisor.children if c.process.poll() is None] == []
    assert not (tmp_path / "data" / "up.json").exists()


@pytest.mark.processes
def test_a_stop_during_the_backoff_stops_at_once_and_restarts_nothing(tmp_path, redis_server):
    said: list[str] = []
    policy = RestartPolicy(first_delay=30.0)
    options = stack_options(tmp_path, redis_server.url)
    supervisor = DyingWorker(options, say=said.append, restart_policy=policy)
    supervisor.trigger = tmp_path / "die-now"
    asked: list[float] = []

    def stop_in_the_backoff() -> None:
        deadline = time.monotonic() + 30
        while not any("restarting worker in 30s" in line for line in said) and time.monotonic() < deadline:
            time.sleep(0.02)
        asked.append(time.monotonic())
        supervisor._on_signal(signal.SIGTERM, None)  # what Ctrl-C or SIGTERM to `up` does

    try:
        supervisor.start()
        tree = stack_tree(supervisor)
        supervisor.trigger.touch()
        stopper = threading.Thread(target=stop_in_the_backoff)
        stopper.start()
        assert supervisor.watch() == 0
        returned = time.monotonic()
        stopper.join()
    finally:
        supervisor.shutdown()
    stopped = time.monotonic()
    assert asked and returned - asked[0] < 5.0 and stopped - asked[0] < 10.0  # not the 30 s backoff
    assert not any("worker restarted" in line for line in said), said
    assert [p for p in tree if p.alive()] == []
    assert "restarted" not in (tmp_path / "data" / "logs" / "worker.log").read_text()


@pytest.mark.parametrize("victim", ["web", "redis-server"])
@pytest.mark.processes
def test_a_dead_web_tier_or_redis_stops_the_whole_stack(tmp_path, victim):
    said: list[str] = []
    supervisor = Supervisor(stack_options(tmp_path, None), say=said.append)
    try:
        supervisor.start()
        tree = stack_tree(supervisor)
        assert len(tree) >= 4  # web (+ its workers), worker (+ its RQ worker)
        if victim == "web":
            pid = next(c.process.pid for c in supervisor.children if c.name == "web")
        else:
            pid = supervisor.redis.process.pid
            tree.append(procs.Proc(pid, procs.read_stat(pid)[2]))
        os.kill(pid, signal.SIGKILL)
        assert supervisor.watch() == 1
    finally:
        supervisor.shutdown()
    assert f"worktrain: {victim} (pid {pid}) was killed by SIGKILL" in "\n".join(said), said
    assert not any("restarting" in line for line in said), said
    assert [p for p in tree if p.alive()] == []
    assert not (tmp_path / "data" / "up.json").exists()
