"""Tool arguments the MCP SDK refuses, answered in the API's error shape.

The SDK checks every call's arguments against the tool's input schema before the tool runs;
a mismatch comes back as pydantic's own text (with a link to pydantic's site) and no `code`.
An agent branching on `code` would find none, so `WorkTrainServer.call_tool` turns that
refusal into the body the HTTP API gives for the same mistake, plus the HTTP `status`:

- a malformed `sessionId`: `{"code": "session_not_found", "status": 404}`, what the API
  answers for a malformed id (README's HTTP API), with a sentence naming the expected form;
- anything else: `{"code": "invalid_request", "status": 400, "fields": [...]}`, one entry
  per refused field (`field`, `message`), the API's 400.

Nothing is sent to the API for such a call.
"""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

SESSION_FIELDS = frozenset({"sessionId"})
SESSION_ID_FORM = "sess_ followed by 26 characters, as dispatch returned it"


def refusal_body(tool: str, exc: ValidationError) -> dict[str, Any]:
    """The API-shaped error for arguments that failed the tool's input schema."""
    fields = [
        {"field": ".".join(str(part) for part in error["loc"]) or "arguments", "message": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False)
    ]
    if any(entry["field"] in SESSION_FIELDS for entry in fields):
        return {
            "success": False,
            "code": "session_not_found",
            "error": f"Session not found: sessionId must be {SESSION_ID_FORM}.",
            "status": 404,
        }
    named = "; ".join(f"{entry['field']}: {entry['message']}" for entry in fields)
    return {
        "success": False,
        "code": "invalid_request",
        "error": f"Invalid arguments for {tool}: {named}.",
        "fields": fields,
        "status": 400,
    }


def error_result(body: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body))], structured_content=body, is_error=True
    )


class WorkTrainServer(MCPServer[Any]):
    """The SDK's server, with schema refusals in the API's error shape."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            return error_result(refusal_body(name, cause))
