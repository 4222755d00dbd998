"""`worktrain mcp`: WorkTrain as Model Context Protocol tools, over stdio (README's worktrain command).

A coordinating agent (Claude Code, any MCP client) dispatches sessions, steers them — with
compare-and-swap on the live turn, an idempotency key, an interrupt, a receipt to wait on —
reads sessions, steers, events and issues, retracts or edits a pending steer, cancels, and
forks a session from one of its turns.
Built on the official `mcp` SDK's `MCPServer` (the SDK's name for FastMCP since mcp 2), and
a thin client of the HTTP API like the CLI: every tool is one request or two through
`cli.client.Client` (`WORKTRAIN_URL`, `WORKTRAIN_API_TOKEN`), run in a worker thread of the
SDK, each call on a client of its own.

A tool answers the API's JSON `data` (or the whole body where there is no `data`) as
structured content, with the same JSON as text. An API error is a tool error
(`isError: true`) carrying the API's body — `{"success": false, "code", "error", ...}` plus
the HTTP `status` — so an agent can branch on `code` (`stale_turn`, `steer_taken`, ...).
Stdout is the protocol's: nothing else is printed there.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from cli.client import SESSION_ID_RE, ApiError, Client, steer_body
from cli.mcperrors import WorkTrainServer
from daemon.workflows.agentconfig import AgentConfig

INSTRUCTIONS = """\
WorkTrain runs LLM agent sessions through step-by-step workflows and lets you steer them.
Start one with `dispatch` (see `list_workflows`), follow it with `get_session` and
`get_events`, and send it guidance with `steer`: the text reaches the agent at its next turn
end, exactly once and in order; pass `wait` to get the receipt (the turn that received it),
`mode: "interrupt"` to cut the live turn short, `expectedTurnId` (the session's `turnId`) to
be refused (`stale_turn`) if the agent has moved on, and a `clientMsgId` to make a retry
safe. A steer not yet taken can be withdrawn (`retract_steer`) or rewritten (`edit_steer`).
A session that went wrong at some turn can be tried again from the turn before (`fork`,
with a steer). Errors carry the API's `code`."""

SessionId = Annotated[
    str,
    Field(
        description="The session's id, as dispatch returned it: sess_ followed by 26 characters.",
        pattern=SESSION_ID_RE.pattern,
    ),
]
Offset = Annotated[
    int, Field(ge=1, description="The steer's offset (1, 2, 3, ... per session), as steer returned it.")
]
ClientKey = Annotated[
    str | None,
    Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:-]{1,128}$",
        description="Your idempotency key for this steer (1-128 of A-Za-z0-9._:-): retrying with "
        "the same key and text answers `duplicate` with the first steer, never a second one.",
    ),
]
Cursor = Annotated[
    str | None, Field(default=None, description="Start after this cursor: the `next` of the previous page.")
]
Limit = Annotated[int, Field(default=100, ge=1, le=1000, description="At most this many entries.")]
WaitSeconds = Annotated[
    float,
    Field(
        default=0,
        ge=0,
        le=600,
        description="Seconds to wait for the receipt: the answer comes once the steer is "
        "delivered (with `deliveredTurnId`), retracted or undelivered (the session ended first), "
        "or when the time is up (still `pending`). 0: answer at once.",
    ),
]

READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


def ok(body: dict[str, Any]) -> CallToolResult:
    data = body.get("data", body)
    content = data if isinstance(data, dict) else {"data": data}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(content))], structured_content=content
    )


def failed(exc: ApiError) -> CallToolResult:
    error = {**exc.json_body(), "status": exc.status}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(error))], structured_content=error, is_error=True
    )


class Tools:
    """The tools, each a thin call of the HTTP API."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0) -> None:
        self.url = url
        self.token = token
        self.timeout = timeout

    def call(self, action: Callable[[Client], dict[str, Any]]) -> CallToolResult:
        try:
            client = Client(self.url, self.token, self.timeout)
        except ApiError as exc:
            return failed(exc)
        try:
            return ok(action(client))
        except ApiError as exc:
            return failed(exc)
        finally:
            client.close()

    def dispatch(
        self,
        workflowId: Annotated[str, Field(description="The workflow to run: an `id` from list_workflows.")],
        goal: Annotated[str, Field(description="What the agent should achieve, in plain words.")],
        workspacePath: Annotated[
            str, Field(description="Absolute path of the folder the agent works in, on the worker's host.")
        ],
        context: Annotated[
            dict[str, Any] | None,
            Field(default=None, description="Facts handed to the workflow (a JSON object)."),
        ] = None,
        gates: Annotated[
            Literal["skip", "steer"] | None,
            Field(default=None, description='"steer": steps that require confirmation wait for a steer.'),
        ] = None,
        idempotencyKey: Annotated[
            str | None,
            Field(
                default=None,
                pattern=r"^[A-Za-z0-9._:-]{1,128}$",
                description="Makes a retried dispatch safe: the same key and body answer the first session.",
            ),
        ] = None,
        branchStrategy: Annotated[
            Literal["none", "read-only", "worktree"] | None,
            Field(
                default=None,
                description='"worktree": a git worktree and branch of its own; "read-only": it only looks; '
                '"none" (default): the folder as it is.',
            ),
        ] = None,
        delivery: Annotated[
            Literal["commit", "push", "none"] | None,
            Field(default=None, description="worktree: commit (default), push, or none at the end."),
        ] = None,
        baseRef: Annotated[
            str | None, Field(default=None, description="worktree: the branch starts here (default HEAD).")
        ] = None,
        keepWorktree: Annotated[
            bool | None, Field(default=None, description="worktree: keep the worktree after delivery.")
        ] = None,
        callbackUrl: Annotated[
            str | None,
            Field(
                default=None,
                description="An http(s) URL told of this session (and its children and forks): "
                "session.finished, session.question, session.delivered, issue.reported, session.forked, "
                "as signed JSON POSTs.",
            ),
        ] = None,
        agentConfig: Annotated[
            AgentConfig | None,
            Field(
                default=None,
                description="The session's model, maxOutputTokens and thinkingBudgetTokens (each optional: "
                "the workflow's, then the fleet's default).",
            ),
        ] = None,
    ) -> CallToolResult:
        """Start a session of a workflow. Answers its `sessionId` (status `queued`); it can be
        steered at once."""
        body: dict[str, Any] = {"workflowId": workflowId, "goal": goal, "workspacePath": workspacePath}
        if context is not None:
            body["context"] = context
        if gates is not None:
            body["gates"] = gates
        placement = {"branchStrategy": branchStrategy, "delivery": delivery, "baseRef": baseRef}
        extra = {**placement, "keepWorktree": keepWorktree, "callbackUrl": callbackUrl}
        body.update({k: v for k, v in extra.items() if v is not None})
        if agentConfig is not None:
            body["agentConfig"] = agentConfig.model_dump(exclude_none=True)
        headers = {"Idempotency-Key": idempotencyKey} if idempotencyKey else None
        return self.call(lambda c: c.post("/api/v2/auto/dispatch", body, headers=headers))

    def steer(
        self,
        sessionId: SessionId,
        text: Annotated[str, Field(min_length=1, description="What the agent should hear, in plain words.")],
        expectedTurnId: Annotated[
            int | None,
            Field(
                default=None,
                ge=0,
                description="Accept only while this turn is live (get_session's `turnId`); else the "
                "error `stale_turn` (with `currentTurnId`) or `no_live_turn`.",
            ),
        ] = None,
        clientMsgId: ClientKey = None,
        mode: Annotated[
            Literal["queue", "interrupt"],
            Field(
                default="queue",
                description='"queue": delivered at the next turn end. "interrupt": the live turn is '
                "cut short (the model call in flight abandoned, a running command stopped) and the "
                "agent gets the text at once.",
            ),
        ] = "queue",
        wait: WaitSeconds = 0,
    ) -> CallToolResult:
        """Steer a session: answers `status` (`accepted` or `duplicate`) and the `steer`
        (`offset`, `turnId`); with `wait`, also its `receipt` (`state`, `deliveredTurnId`)."""
        body = steer_body(text, expectedTurnId, clientMsgId, mode)

        def act(client: Client) -> dict[str, Any]:
            reply = client.post(f"/api/v2/sessions/{sessionId}/steer", body)
            answer = {"status": reply.get("status"), "steer": reply.get("steer")}
            if wait > 0:
                answer["receipt"] = client.wait_for_steer(sessionId, int(reply["steer"]["offset"]), wait)
            return answer

        return self.call(act)

    def get_steer(
        self,
        sessionId: SessionId,
        offset: Annotated[int | None, Field(default=None, ge=1, description="The steer's offset.")] = None,
        clientMsgId: ClientKey = None,
        wait: WaitSeconds = 0,
    ) -> CallToolResult:
        """One steer by offset or clientMsgId: `state` (pending, delivered, undelivered,
        retracted), `text`, `deliveredTurnId`; with `wait`, once it is no longer pending."""

        def act(client: Client) -> dict[str, Any]:
            where = offset
            if where is None:
                if clientMsgId is None:
                    raise ApiError(
                        "give offset or clientMsgId",
                        body=_local("invalid_request", "give offset or clientMsgId"),
                    )
                found = client.get(f"/api/v2/sessions/{sessionId}/steers", clientMsgId=clientMsgId)
                where = int(found["data"]["offset"])
            if wait > 0:
                return {"data": client.wait_for_steer(sessionId, where, wait)}
            return client.get(f"/api/v2/sessions/{sessionId}/steers/{where}")

        return self.call(act)

    def get_session(self, sessionId: SessionId) -> CallToolResult:
        """A session's record: `status`, `turnId` (the live turn, for expectedTurnId; 0 when
        none), `turnCount`, the step position, `pendingSteers`, `outcome` once it ended;
        `children` (the sub-agents it spawned: id, workflow, status, outcome), its
        `parentSessionId`/`rootSessionId`/`depth`, and `pendingQuestion` while it waits for a reply."""
        return self.call(lambda c: c.get(f"/api/v2/sessions/{sessionId}"))

    def list_sessions(
        self,
        status: Annotated[
            Literal["queued", "running", "waiting", "completed", "failed", "cancelled"] | None,
            Field(default=None, description="Only sessions in this status."),
        ] = None,
        limit: Limit = 100,
        parent: Annotated[
            str | None,
            Field(
                default=None,
                pattern=SESSION_ID_RE.pattern,
                description="Only the sub-agents this session spawned.",
            ),
        ] = None,
    ) -> CallToolResult:
        """Sessions, newest first, with `totalCount`."""
        return self.call(lambda c: c.get("/api/v2/sessions", status=status, limit=limit, parent=parent))

    def list_steers(
        self,
        sessionId: SessionId,
        since: Annotated[
            int,
            Field(default=0, ge=0, description="Steers after this offset: the `next` of the previous page."),
        ] = 0,
        limit: Limit = 100,
    ) -> CallToolResult:
        """A session's steers in offset order, each with its `state` and receiving turn; `next`."""
        return self.call(
            lambda c: c.get(f"/api/v2/sessions/{sessionId}/steers", since=since or None, limit=limit)
        )

    def retract_steer(self, sessionId: SessionId, offset: Offset) -> CallToolResult:
        """Withdraw a steer the agent has not been given yet: no model call will see it. The
        error `steer_taken` means a turn end already took it (it is delivered as it was)."""
        return self.call(lambda c: c.delete(f"/api/v2/sessions/{sessionId}/steers/{offset}"))

    def edit_steer(
        self,
        sessionId: SessionId,
        offset: Offset,
        text: Annotated[str, Field(min_length=1, description="The new text.")],
    ) -> CallToolResult:
        """Rewrite a steer the agent has not been given yet, keeping its offset and place. The
        error `steer_taken` means a turn end already took it."""
        return self.call(lambda c: c.patch(f"/api/v2/sessions/{sessionId}/steers/{offset}", {"text": text}))

    def get_events(
        self,
        sessionId: Annotated[
            str | None,
            Field(default=None, pattern=SESSION_ID_RE.pattern, description="Only this session's events."),
        ] = None,
        since: Cursor = None,
        limit: Limit = 100,
    ) -> CallToolResult:
        """Events after a cursor, oldest first (turns, model replies, tool calls, steps, steers,
        issues, session_completed); pass the answer's `next` as `since` to read on."""
        return self.call(lambda c: c.get("/api/v2/events", sessionId=sessionId, since=since, limit=limit))

    def get_issues(
        self,
        sessionId: Annotated[
            str | None,
            Field(default=None, pattern=SESSION_ID_RE.pattern, description="Only this session's issues."),
        ] = None,
        since: Cursor = None,
        limit: Limit = 100,
    ) -> CallToolResult:
        """Issues the agents reported (kind, severity, summary), oldest first; `next` to read on."""
        return self.call(lambda c: c.get("/api/v2/issues", sessionId=sessionId, since=since, limit=limit))

    def cancel(self, sessionId: SessionId) -> CallToolResult:
        """Cancel a session: a queued one ends now, a running one within seconds (its live turn
        is cut short)."""
        return self.call(lambda c: c.post(f"/api/v2/sessions/{sessionId}/cancel", {}))

    def fork(
        self,
        sessionId: SessionId,
        turn: Annotated[int, Field(ge=1, description="Carry on after this turn of the source (its turnId).")],
        steer: Annotated[
            str | None,
            Field(default=None, min_length=1, description="What the fork's next turn reads first."),
        ] = None,
        agentConfig: Annotated[
            AgentConfig | None,
            Field(default=None, description="Another model or budgets (unset fields: the source's)."),
        ] = None,
        goal: Annotated[str | None, Field(default=None, min_length=1, description="Another goal.")] = None,
        idempotencyKey: Annotated[
            str | None,
            Field(
                default=None,
                pattern=r"^[A-Za-z0-9._:-]{1,128}$",
                description="Makes a retried fork safe: the same key and request answer the first fork.",
            ),
        ] = None,
    ) -> CallToolResult:
        """Fork a session from one of its turns (running or ended): a new session whose history
        is the source's through that turn (not asked of the model again), at the workflow step
        after it, with — for a worktree session — the worktree as it was then, on its own branch;
        its next turn reads `steer` first. Answers its `sessionId` and `forkOf`
        (`conversationOnly: true`: the source had no worktree, the fork shares its workspace).
        Errors: `unknown_turn`, `journal_gone`, `turn_compacted`, `snapshot_gone`."""
        body: dict[str, Any] = {"turn": turn}
        extra = {"steer": steer, "goal": goal}
        body.update({k: v for k, v in extra.items() if v is not None})
        if agentConfig is not None:
            body["agentConfig"] = agentConfig.model_dump(exclude_none=True)
        headers = {"Idempotency-Key": idempotencyKey} if idempotencyKey else None
        return self.call(lambda c: c.post(f"/api/v2/sessions/{sessionId}/fork", body, headers=headers))

    def list_workflows(self) -> CallToolResult:
        """The workflows a session can run (id, name, steps), and files that were skipped."""
        return self.call(lambda c: c.get("/api/v2/workflows"))

    def get_signals(
        self,
        sessionId: SessionId,
        since: Annotated[
            int,
            Field(default=0, ge=0, description="Signals after this offset: the `next` of the previous page."),
        ] = 0,
        wait: Annotated[
            float,
            Field(
                default=0,
                ge=0,
                le=60,
                description="When there is no signal after `since` yet, wait up to this many seconds "
                "for the next one (a long poll). 0: answer at once.",
            ),
        ] = 0,
        limit: Limit = 100,
    ) -> CallToolResult:
        """What the session's agent told its coordinator (signal_coordinator): progress,
        findings, results, and questions (`wait: true`: the agent is parked until you `reply`).
        Each signal has `offset`, `kind`, `summary`, `data`, `turnId`; `next` to read on."""
        query: dict[str, Any] = {"since": since, "limit": limit}
        if wait:
            query["wait"] = wait
        return self.call(
            lambda c: c.get(f"/api/v2/sessions/{sessionId}/signals", timeout=wait + self.timeout, **query)
        )

    def reply(
        self,
        sessionId: SessionId,
        text: Annotated[str, Field(min_length=1, description="Your answer to the agent's question.")],
    ) -> CallToolResult:
        """Answer a session's question (`waitingFor: reply`, see get_signals): the text is a
        steer, returned to the agent as the result of its waiting signal_coordinator call."""
        return self.call(
            lambda c: c.post(f"/api/v2/sessions/{sessionId}/steer", steer_body(text, None, None, "queue"))
        )


def _local(code: str, message: str) -> dict[str, Any]:
    return {"success": False, "code": code, "error": message}


READ_TOOLS = (
    "get_steer",
    "get_session",
    "list_sessions",
    "list_steers",
    "get_events",
    "get_issues",
    "list_workflows",
    "get_signals",
)
WRITE_TOOLS = ("dispatch", "steer", "retract_steer", "edit_steer", "cancel", "reply", "fork")


def build_server(url: str, token: str | None) -> MCPServer[Any]:
    tools = Tools(url, token)
    server: MCPServer[Any] = WorkTrainServer("worktrain", instructions=INSTRUCTIONS, version=_version())
    for name in (*WRITE_TOOLS, *READ_TOOLS):
        fn = getattr(tools, name)
        described = inspect.cleandoc(fn.__doc__ or "")
        server.add_tool(
            fn, name=name, description=described, annotations=READ if name in READ_TOOLS else WRITE
        )
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("worktrain")
    except PackageNotFoundError:
        return os.environ.get("WORKTRAIN_VERSION", "0")


def serve(url: str, token: str | None) -> None:
    """Serve on stdin/stdout until the client closes stdin."""
    build_server(url, token).run("stdio")
