"""The MCP `dispatch` tool takes the workspace fields (README's Coding sessions) and passes them on: a real
MCP client, `worktrain mcp` on stdio, a real `worktrain web` and worker (tests/e2e)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.e2e.loops import run_in_own_thread
from tests.e2e.test_steer_e2e import ROOT, TOKEN, Stack

mcp_client = pytest.importorskip("mcp.client.client")
stdio = pytest.importorskip("mcp.client.stdio")

pytestmark = pytest.mark.e2e


async def dispatch_over_mcp(stack: Stack, repo: str) -> tuple[dict[str, Any], dict[str, Any]]:
    params = stdio.StdioServerParameters(
        command=sys.executable,
        args=["-m", "cli", "mcp"],
        env={"WORKTRAIN_URL": stack.web_url, "WORKTRAIN_API_TOKEN": TOKEN},
        cwd=str(ROOT),
    )
    async with mcp_client.Client(params, read_timeout_seconds=60) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = tools["dispatch"].input_schema["properties"]
        arguments = {
            "workflowId": "two-step",
            "goal": "look around",
            "workspacePath": repo,
            "branchStrategy": "worktree",
            "delivery": "none",
            "baseRef": "main",
            "keepWorktree": True,
        }
        result = await client.call_tool("dispatch", arguments)
        assert not result.is_error, result.content
        sid = json.loads(result.content[0].text)["sessionId"]
        shown = await client.call_tool("get_session", {"sessionId": sid})
        return schema, json.loads(shown.content[0].text)


def test_mcp_dispatch_passes_the_workspace_fields(stack: Stack) -> None:
    repo = stack.tmp / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("# r\n")
    for args in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i"],
    ):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    # (in a thread of its own: Playwright's loop may be running in this one)
    schema, session = run_in_own_thread(dispatch_over_mcp(stack, str(repo)))
    assert {"branchStrategy", "delivery", "baseRef", "keepWorktree"} <= set(schema)
    shown = [session[name] for name in ("branchStrategy", "deliveryMode", "baseRef", "keepWorktree")]
    assert shown == ["worktree", "none", "main", True]
