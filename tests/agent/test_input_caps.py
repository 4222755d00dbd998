"""Issue 29, item 11: `signal_coordinator` took 2 MB of `data` and `report_issue` 500 KB of
`context`, stored in Redis, mirrored to JSONL and printed by the CLI. Both are capped at
64 KiB; over it the model gets a tool error saying so, and nothing is stored. Driven by the
fake model on the real bus, as an agent would call them."""

from __future__ import annotations

import contextlib

import pytest

from daemon.fakemodel import ScriptedModel, ScriptExhausted, reply, tool
from daemon.turn.messages import ToolResultBlock
from tests.agent.conftest import Harness
from tests.agent.test_signal_reply import with_fleet

pytestmark = pytest.mark.unit

BIG_DATA = {"log": "x" * 2_000_000}
BIG_CONTEXT = "y" * 500_000


def test_oversized_signal_data_and_issue_context_are_tool_errors(harness: Harness) -> None:
    harness.create()
    model = ScriptedModel(
        [
            reply(
                tool("signal_coordinator", kind="progress", summary="big", data=BIG_DATA),
                tool(
                    "report_issue", kind="tool_failure", severity="warn", summary="big", context=BIG_CONTEXT
                ),
                tool("signal_coordinator", kind="progress", summary="small", data={"log": "x" * 60_000}),
                tool("report_issue", kind="tool_failure", severity="warn", summary="small", context="fine"),
            )
        ]
    )
    with contextlib.suppress(ScriptExhausted):
        with_fleet_run(harness, model)
    assert len(model.requests) >= 2
    results = [b for b in model.requests[1].messages[-1].content if isinstance(b, ToolResultBlock)]
    assert [r.is_error for r in results] == [True, True, False, False], results
    assert "data is 2000010 bytes; at most 65536 are accepted" in str(results[0].content)
    assert "context is 500002 bytes; at most 65536 are accepted" in str(results[1].content)
    kinds = harness.events.kinds()
    assert kinds.count("coordinator_signal") == 1 and kinds.count("issue_reported") == 1, kinds
    stored = harness.bus.client.xrange(harness.bus.keys.issues)
    assert len(stored) == 1 and all(len(str(entry)) < 70_000 for entry in stored)


def with_fleet_run(harness: Harness, model: ScriptedModel) -> None:
    from daemon.session.runner import run_session

    run_session(harness.session_id, with_fleet(harness, harness.services(model)))
