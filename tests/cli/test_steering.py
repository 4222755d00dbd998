"""`worktrain steer --mode/--wait`, `steers [--follow]`, `retract`, `edit` (README's Managing steers,
README's worktrain command)
against a real `worktrain web`, a test thread playing the worker on the same Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis

from cli.client import ExitCode
from daemon.bus.keys import Keys
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.bus.streams.eventsink import EventSink
from daemon.schema.events import SteerDelivered, ending_events
from daemon.schema.records import SessionStatus
from tests.cli.conftest import Cli
from tests.cli.test_commands import dispatch
from tests.cli.test_startup import HEAVY, loaded_modules

pytestmark = pytest.mark.unit


def worker(client: redis.Redis, session_id: str) -> SessionChannel:
    channel = SteerBus(client, Keys("wt")).channel(session_id, "test-worker", 30)
    channel.claim()
    channel.start_turn(1)
    return channel


def later(action: Callable[[], object], delay: float = 0.4) -> threading.Thread:
    def run() -> None:
        time.sleep(delay)
        action()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def deliver(channel: SessionChannel) -> None:
    """A turn end that takes the steers, the checkpoint carrying them, the next turn (whose
    request leaves)."""
    steers = channel.turn_ended()
    channel.checkpoint(0, ['{"role":"user","content":"x"}'], [s.offset for s in steers], 2)
    channel.start_turn(2)
    channel.request_sent(2)


def test_steer_wait_prints_the_receipt_when_delivered(cli: Cli, tmp_path, real_redis) -> None:
    session_id = dispatch(cli, tmp_path)
    channel = worker(real_redis, session_id)
    thread = later(lambda: deliver(channel))
    result = cli("steer", session_id, "tell me when", "--wait")
    thread.join()
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["accepted: offset 1 (live turn 1)", "delivered: offset 1 in turn 2"]


def test_steer_wait_json_carries_the_receipt(cli: Cli, tmp_path, real_redis) -> None:
    session_id = dispatch(cli, tmp_path)
    channel = worker(real_redis, session_id)
    thread = later(lambda: deliver(channel))
    code, body = cli.json("steer", session_id, "x", "--wait", "--mode", "interrupt")
    thread.join()
    assert code == 0
    assert body["steer"]["mode"] == "interrupt"
    assert (body["receipt"]["state"], body["receipt"]["deliveredTurnId"]) == ("delivered", 2)


def test_steer_wait_exits_10_when_retracted_or_undelivered(cli: Cli, tmp_path, real_redis) -> None:
    session_id = dispatch(cli, tmp_path)
    channel = worker(real_redis, session_id)
    thread = later(lambda: channel.bus.retract(session_id, 1))  # (CliRunner is not thread-safe)
    result = cli("steer", session_id, "never mind", "--wait")
    thread.join()
    assert result.exit_code == ExitCode.NOT_DELIVERED and "retracted: offset 1" in result.stdout
    thread = later(lambda: channel.finish(SessionStatus.FAILED, "incomplete"))
    result = cli("steer", session_id, "too late", "--wait")
    thread.join()
    assert result.exit_code == ExitCode.NOT_DELIVERED and "undelivered: offset 2" in result.stdout


def test_steer_wait_exits_11_when_still_pending(cli: Cli, tmp_path) -> None:
    session_id = dispatch(cli, tmp_path)
    started = time.monotonic()
    result = cli("steer", session_id, "nobody listens", "--wait", "--wait-timeout", "0.5")
    assert result.exit_code == ExitCode.STILL_PENDING and "pending: offset 1" in result.stdout
    assert time.monotonic() - started >= 0.5


def test_retract_and_edit(cli: Cli, tmp_path, real_redis) -> None:
    session_id = dispatch(cli, tmp_path)
    channel = worker(real_redis, session_id)
    for text in ("one", "two", "three"):
        cli("steer", session_id, text)
    assert cli("edit", session_id, "2", "TWO").stdout == "edited: offset 2\n"
    assert cli("retract", session_id, "3").stdout == "retracted: offset 3\n"
    code, body = cli.json("edit", session_id, "3", "x")
    assert (code, body["code"]) == (ExitCode.CONFLICT, "steer_retracted")
    assert [s.text for s in channel.turn_ended()] == ["one", "TWO"]
    late = cli("retract", session_id, "1")
    assert late.exit_code == ExitCode.CONFLICT and "steer_taken" in late.stderr
    assert cli("retract", session_id, "9").exit_code == ExitCode.NOT_FOUND
    assert cli("edit", session_id, "0", "x").exit_code == ExitCode.USAGE


def test_steers_table_json_and_follow(cli: Cli, tmp_path, real_redis) -> None:
    session_id = dispatch(cli, tmp_path)
    channel = worker(real_redis, session_id)
    cli("steer", session_id, "first")
    cli("steer", session_id, "second", "--mode", "interrupt")
    table = cli("steers", session_id)
    assert table.exit_code == 0 and "first" in table.stdout and "interrupt" in table.stdout
    code, body = cli.json("steers", session_id)
    assert code == 0 and [s["offset"] for s in body["data"]["steers"]] == [1, 2]

    def play() -> None:  # what the worker would do and emit
        channel.bus.retract(session_id, 1)
        deliver(channel)
        sink = EventSink(real_redis, Keys("wt"), None)
        sink.emit(SteerDelivered(sessionId=session_id, turnId=2, offsets=[2]))
        channel.finish(SessionStatus.COMPLETED, "workflow_complete")
        sink.emit(*ending_events(session_id, "completed", "workflow_complete", "", []))

    thread = later(play, 0.5)
    followed = cli("steers", session_id, "--follow")
    thread.join()
    assert followed.exit_code == 0
    assert followed.stdout.splitlines() == [
        "#1 pending: first",
        "#2 pending, interrupt: second",
        "#1 retracted: first",
        "#2 delivered, interrupt to turn 2: second",
    ]


def test_the_steer_management_commands_import_nothing_heavy(web_process, cli, tmp_path) -> None:
    session_id = dispatch(cli, tmp_path)
    for args in (
        ["steers", session_id],
        ["retract", session_id, "1"],
        ["steer", session_id, "x", "--wait-timeout", "0", "--wait"],
    ):
        modules = loaded_modules(*args, url=web_process.url)
        assert not modules.intersection(HEAVY), (args, modules.intersection(HEAVY))
