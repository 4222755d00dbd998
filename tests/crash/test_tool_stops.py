"""docs/durability.md with real processes: a receipt names the turn whose request actually carried
the steer, and a running tool stops for a cancel and for the session's wall clock.

- kill -9 between turn binding and the send (fault point `before_send`): the steer's receipt
  names the resumed attempt's turn, the first request the fake model received carrying it;
- a cancel while Bash runs `sleep 1000`: the session is `cancelled` within 2 s and the
  command's process is gone;
- a workflow whose wall clock is 20 s, its Bash running `sleep 1000`: stopped at ~20 s,
  `failed/max_wall_clock`, the command gone.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest

from daemon.agent.model import ModelReply, ModelRequest
from daemon.agent.sendguard import ATTEMPT_HEADER
from daemon.fakemodel import reply, tool
from tests.crash.harness import WORKFLOW, SessionModel, Stack, running, session_of, user_texts, wait_until

pytestmark = pytest.mark.e2e

STEER = "STEER-7f3a: please also look at the tests"


def test_a_kill_between_binding_and_sending_names_the_turn_that_sent(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(lease_seconds=2.0, faults=True).start(workers=1)
    stack.model.hold_when = lambda sid, n: n == 1  # turn 1's call stays open: the steer waits
    # attempt 1 dies right before turn 2's request (the one that would carry the steer) leaves
    sid = stack.dispatch({"worktrainFault": {"point": "before_send", "occurrence": 2}})
    wait_until(lambda: stack.model.held(sid), "turn 1's model call", 30)
    assert stack.steer(sid, STEER).status == 200
    stack.model.release(sid)
    record = stack.wait_finished(sid, timeout=90)
    assert (record["status"], record["outcome"]) == ("completed", "workflow_complete"), record

    # ground truth: what the fake model received, and from which attempt
    carrying = [r for r in stack.model.requests_of(sid) if STEER in user_texts(r)]
    first = carrying[0]["_headers"][ATTEMPT_HEADER]
    assert first == f"{sid}/2", "attempt 1 died before its request carrying the steer left"
    resumed = stack.events_of(sid, "session_resumed")
    assert [e["fromTurn"] for e in resumed] == [2]  # attempt 1 bound turns 1 and 2
    sent_turn = 3  # the resumed attempt's first turn: its first request carried the steer
    receipts = [e for e in stack.events_of(sid, "steer_delivered") if 1 in e["offsets"]]
    assert [e["turnId"] for e in receipts] == [sent_turn], receipts
    delivered = [e for e in stack.journal(sid) if e["type"] == "delivered"]
    assert [(json.loads(e["offsets"]), int(e["turnId"])) for e in delivered] == [([1], sent_turn)]


class SleepModel(SessionModel):
    """The first call runs a command that would take 1000 s; any later one continues."""

    def __init__(self, argv: tuple[str, str]) -> None:
        super().__init__(latency=0.0)
        self.argv = argv

    def rule(self, request: ModelRequest) -> ModelReply:
        sid = session_of(request.system)
        with self._lock:
            self.calls[sid] += 1
            n = self.calls[sid]
        if n == 1:
            return reply(tool("Bash", command=" ".join(self.argv), timeout_seconds=3600))
        return reply(tool("continue_workflow", notes="Stopped early; moving on as asked."))


def test_a_cancel_kills_the_running_tool_within_two_seconds(make_stack: Callable[..., Stack]) -> None:
    argv = ("sleep", "1000.314159")
    stack = make_stack(lease_seconds=30.0, model=SleepModel(argv)).start(workers=1)
    sid = stack.dispatch()
    wait_until(lambda: running(*argv), "the sleep to run", 30)
    cancelled_at = time.monotonic()
    assert stack.http("POST", f"/api/v2/sessions/{sid}/cancel").status == 202
    record = stack.wait_finished(sid, timeout=30)
    took = time.monotonic() - cancelled_at
    assert (record["status"], record["outcome"]) == ("cancelled", "cancelled"), record
    assert took < 2.0, f"cancelled after {took:.2f}s"
    assert not running(*argv), "the command outlived the cancel"
    print(f"cancel during a running Bash: session cancelled {took:.2f}s after the cancel")


WALL_CLOCK = 8  # seconds: the sleep starts within it (the session's first turn), and ends with it


def test_the_wall_clock_stops_a_running_tool(make_stack: Callable[..., Stack]) -> None:
    argv = ("sleep", "1000.271828")
    stack = make_stack(lease_seconds=30.0, model=SleepModel(argv))
    limited = {**WORKFLOW, "id": "limited", "limits": {"maxWallClockSeconds": WALL_CLOCK}}
    (stack.tmp / "workflows" / "limited.json").write_text(json.dumps(limited))
    stack.start(workers=1)
    started = time.monotonic()
    sid = stack.dispatch(workflow_id="limited")
    wait_until(lambda: running(*argv), "the sleep to run", 30)
    record = stack.wait_finished(sid, timeout=60)
    took = time.monotonic() - started
    assert (record["status"], record["outcome"]) == ("failed", "max_wall_clock"), record
    assert WALL_CLOCK - 1 <= took <= WALL_CLOCK + 6, f"ended after {took:.1f}s"
    assert not running(*argv), "the command outlived the wall clock"
    print(f"wall clock {WALL_CLOCK}s with a Bash sleep 1000: ended after {took:.1f}s")
