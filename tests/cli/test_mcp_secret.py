"""`worktrain mcp` drops its token like the servers do (issue 21, L5): a same-user process
reading /proc/<mcp pid>/environ (an agent's Bash, without a PID namespace) finds no token,
and the MCP server still uses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import IO, Any

import pytest

from tests.agent.procscan import environ_and_cmdline
from tests.cli.conftest import ROOT, TOKEN, WebProcess

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def rpc(stdin: IO[bytes], stdout: IO[bytes], message: dict[str, Any]) -> dict[str, Any] | None:
    """One JSON-RPC message over MCP's stdio framing (a line each); the answer when it has an id."""
    stdin.write(json.dumps(message).encode() + b"\n")
    stdin.flush()
    if "id" not in message:
        return None
    while True:
        line = stdout.readline()
        assert line, "worktrain mcp closed its stdout"
        answer: dict[str, Any] = json.loads(line)
        if answer.get("id") == message["id"]:
            return answer


def test_the_mcp_server_keeps_no_token_in_its_environ(web_process: WebProcess) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKTRAIN_")}
    env |= {"WORKTRAIN_URL": web_process.url, "WORKTRAIN_API_TOKEN": TOKEN}
    mcp = subprocess.Popen(
        [sys.executable, "-m", "cli", "mcp"],
        env=env,
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert mcp.stdin is not None and mcp.stdout is not None
    try:
        init = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        }
        answer = rpc(
            mcp.stdin, mcp.stdout, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        )
        assert answer is not None and "result" in answer, answer
        # Answering means it re-executed itself already (same pid): what an agent reads now.
        blob = environ_and_cmdline(mcp.pid)
        assert b"WORKTRAIN_URL=" in blob  # the environ is readable, and holds the rest
        assert TOKEN.encode() not in blob and b"WORKTRAIN_API_TOKEN" not in blob
        rpc(mcp.stdin, mcp.stdout, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": "list_sessions", "arguments": {}}
        listed = rpc(
            mcp.stdin, mcp.stdout, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        )
        assert listed is not None and listed["result"].get("isError") is not True, (
            listed
        )  # a 401 would be one
        assert TOKEN.encode() not in environ_and_cmdline(mcp.pid)
    finally:
        mcp.stdin.close()
        try:
            mcp.wait(10)
        except subprocess.TimeoutExpired:
            mcp.kill()
            mcp.wait()
