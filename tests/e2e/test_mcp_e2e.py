"""`worktrain mcp` end to end: the official SDK's client launches it over stdio and drives a
real stack (redis-server, `worktrain web` with a token, `worktrain worker`, the fake model
holding its calls) — lists the tools, dispatches, steers with compare-and-swap, waits for
the receipt, reads steers and events, gets a tool error carrying the API's code, cancels."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

import pytest

from tests.e2e.loops import run_in_own_thread
from tests.e2e.test_steer_e2e import ROOT, TOKEN, Stack, http

mcp_client = pytest.importorskip("mcp.client.client")
stdio = pytest.importorskip("mcp.client.stdio")

pytestmark = pytest.mark.e2e

TOOLS = {
    "dispatch", "steer", "get_steer", "get_session", "list_sessions", "list_steers", "retract_steer",
    "edit_steer", "get_events", "get_issues", "cancel", "list_workflows", "get_signals", "reply", "fork",
}  # fmt: skip


def data(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return dict(result.structured_content)


def error(result: Any) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    return dict(result.structured_content)


async def drive(stack: Stack) -> dict[str, Any]:
    params = stdio.StdioServerParameters(
        command=sys.executable,
        args=["-m", "cli", "mcp"],
        env={"WORKTRAIN_URL": stack.web_url, "WORKTRAIN_API_TOKEN": TOKEN},
        cwd=str(ROOT),
    )
    seen: dict[str, Any] = {}
    workspace = stack.tmp / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# mcp\n")
    async with mcp_client.Client(params, read_timeout_seconds=60) as client:
        listed = (await client.list_tools()).tools
        seen["tools"] = {tool.name: tool for tool in listed}
        assert set(seen["tools"]) == TOOLS
        catalog = data(await client.call_tool("list_workflows", {}))
        assert "two-step" in [w["id"] for w in catalog["workflows"]]

        dispatched = data(
            await client.call_tool(
                "dispatch", {"workflowId": "two-step", "goal": "look around", "workspacePath": str(workspace)}
            )
        )
        sid = dispatched["sessionId"]
        while data(await client.call_tool("get_session", {"sessionId": sid}))["turnId"] != 1:
            await asyncio.sleep(0.05)  # turn 1's model call is held by the fake model

        stale = error(
            await client.call_tool("steer", {"sessionId": sid, "text": "late", "expectedTurnId": 7})
        )
        assert (stale["code"], stale["status"], stale["currentTurnId"]) == ("stale_turn", 409, 1)

        release = threading.Timer(0.5, lambda: http("POST", f"{stack.model_url}/_fake/release", {}))
        release.start()
        started = time.monotonic()
        steered = data(
            await client.call_tool(
                "steer",
                {
                    "sessionId": sid,
                    "text": "Also list the files.",
                    "expectedTurnId": 1,
                    "clientMsgId": "m-1",
                    "wait": 30,
                },
            )
        )
        seen["wait_seconds"] = time.monotonic() - started
        assert (steered["status"], steered["steer"]["offset"], steered["steer"]["turnId"]) == (
            "accepted",
            1,
            1,
        )
        assert (steered["receipt"]["state"], steered["receipt"]["deliveredTurnId"]) == ("delivered", 2)
        again = data(
            await client.call_tool(
                "steer", {"sessionId": sid, "text": "Also list the files.", "clientMsgId": "m-1"}
            )
        )
        assert again["status"] == "duplicate"
        by_key = data(await client.call_tool("get_steer", {"sessionId": sid, "clientMsgId": "m-1"}))
        assert by_key["state"] == "delivered"

        steers = data(await client.call_tool("list_steers", {"sessionId": sid}))
        assert [(s["offset"], s["state"]) for s in steers["steers"]] == [(1, "delivered")]
        taken = error(await client.call_tool("retract_steer", {"sessionId": sid, "offset": 1}))
        assert taken["code"] in ("steer_taken", "session_finished")  # the session may have ended
        assert taken["state"] == "delivered"
        events = data(await client.call_tool("get_events", {"sessionId": sid}))
        assert "steer_delivered" in [e["kind"] for e in events["events"]] and events["next"]
        # turn 1 has ended (its successor received the steer): a fork from it (README's Fork a session)
        fork = {"sessionId": sid, "turn": 1, "steer": "Try that again.", "idempotencyKey": "mcp-fork-1"}
        forked = data(await client.call_tool("fork", fork))
        assert (forked["forkOf"]["sessionId"], forked["forkOf"]["turn"], forked["conversationOnly"]) == (
            sid,
            1,
            True,
        )
        assert data(await client.call_tool("fork", fork))["sessionId"] == forked["sessionId"]  # the same key
        unknown = error(await client.call_tool("fork", {"sessionId": sid, "turn": 99}))
        assert (unknown["code"], unknown["status"]) == ("unknown_turn", 400)

        # refused by the input schema, nothing sent, in the API's error shape (no pydantic text)
        bad = error(await client.call_tool("get_session", {"sessionId": "not-a-session"}))
        assert (bad["success"], bad["code"], bad["status"]) == (False, "session_not_found", 404)
        assert "sess_" in bad["error"] and "pydantic" not in json.dumps(bad)
        wrong = error(await client.call_tool("retract_steer", {"sessionId": sid, "offset": 0}))
        assert (wrong["code"], wrong["status"], [f["field"] for f in wrong["fields"]]) == (
            "invalid_request",
            400,
            ["offset"],
        )
        assert "http" not in wrong["error"]

        http("POST", f"{stack.model_url}/_fake/hold", {})
        second = data(
            await client.call_tool(
                "dispatch",
                {
                    "workflowId": "two-step",
                    "goal": "to be cancelled",
                    "workspacePath": str(workspace),
                    "agentConfig": {
                        "model": "claude-haiku-4-5",
                        "thinkingBudgetTokens": 1024,
                        "maxOutputTokens": 2048,
                    },
                },
            )
        )["sessionId"]
        resolved = data(await client.call_tool("get_session", {"sessionId": second}))["agentConfig"]
        assert resolved == {
            "model": "claude-haiku-4-5",
            "maxOutputTokens": 2048,
            "thinkingBudgetTokens": 1024,
        }
        refused = error(
            await client.call_tool(
                "dispatch",
                {
                    "workflowId": "two-step",
                    "goal": "thinks too much",
                    "workspacePath": str(workspace),
                    "agentConfig": {"maxOutputTokens": 2048, "thinkingBudgetTokens": 4096},
                },
            )
        )
        assert refused["status"] == 400 and "below maxOutputTokens" in refused["error"]
        cancelled = data(await client.call_tool("cancel", {"sessionId": second}))
        assert cancelled["status"] in ("cancelled", "cancel_requested")
        http("POST", f"{stack.model_url}/_fake/release", {})
        deadline = time.monotonic() + 30
        while data(await client.call_tool("get_session", {"sessionId": second}))["status"] != "cancelled":
            assert time.monotonic() < deadline, "the cancelled session did not end in 30 s"
            await asyncio.sleep(0.1)
        for tool, arguments in (
            ("steer", {"sessionId": second, "text": "too late"}),
            ("edit_steer", {"sessionId": second, "offset": 1, "text": "x"}),
            ("retract_steer", {"sessionId": second, "offset": 1}),
        ):
            ended = error(await client.call_tool(tool, arguments))
            assert (ended["code"], ended["status"], ended["outcome"]) == (
                "session_finished",
                404,
                "cancelled",
            ), (
                tool,
                ended,
            )
        missing = error(
            await client.call_tool("get_session", {"sessionId": "sess_01JD0000000000000000000000"})
        )
        assert (missing["code"], missing["status"]) == ("session_not_found", 404)
        seen["issues"] = data(await client.call_tool("get_issues", {"sessionId": sid}))
    return seen


def test_a_coordinating_agent_drives_worktrain_over_mcp(stack: Stack) -> None:
    seen = run_in_own_thread(drive(stack), timeout=120)  # (Playwright's loop may run in this thread)
    steer = seen["tools"]["steer"]
    properties = steer.input_schema["properties"]
    assert {"sessionId", "text", "expectedTurnId", "clientMsgId", "mode", "wait"} <= set(properties)
    assert properties["mode"]["enum"] == ["queue", "interrupt"] or "interrupt" in json.dumps(
        properties["mode"]
    )
    assert all(tool.description for tool in seen["tools"].values())
    assert all(p.get("description") for p in properties.values())
    assert seen["wait_seconds"] < 30
    print(f"mcp steer with wait: receipt after {seen['wait_seconds']:.2f}s (release at 0.5s)")
