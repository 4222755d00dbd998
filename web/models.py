"""Requests (pydantic): bodies and query strings, and how their errors become 400 answers.

These models are what validates every request *and* what the OpenAPI document is generated
from (web/routes.py, web/openapi.py): a field added here is in the document at once.

Bodies are validated straight from the raw bytes (`model_validate_json`: one pass in
pydantic-core, no intermediate dict). Strict mode: `true` is not an integer, `1.0` is not
an integer, `"1"` is not an integer, `null` is "not given" for the optional fields only.
Unknown fields are refused: a typo such as `expectedTurnID` would otherwise silently turn
a compare-and-swap steer into an unconditional one. Query strings are text: their integers
are ASCII digits only, and unknown query arguments are ignored.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Protocol, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic_core import ErrorDetails

from daemon.host.ids import CLIENT_MSG_ID_RE, IDEMPOTENCY_KEY_RE, SESSION_ID_RE
from daemon.host.shortids import MIN_CHARS, id_fragment
from daemon.schema.records import SessionStatus
from daemon.schema.webhookpayloads import check_receiver_url
from daemon.schema.workspace import BranchStrategy, DeliveryMode
from daemon.workflows.agentconfig import AgentConfig
from web.errors import ApiError, invalid_request

TEXT_REQUIRED = "text is required and must be a non-empty string."
# Turn ids are small ordinals (200 turns by default); the cap keeps the value exact in Lua's
# doubles and refuses absurd input instead of passing it to Redis.
MAX_TURN_ID = 2**31 - 1
# A git revision / branch name as dispatch takes it: never an option (no leading `-`), no `..`
GIT_REV = r"^[A-Za-z0-9_][A-Za-z0-9._/~^@-]*$"
GIT_BRANCH = r"^[A-Za-z0-9_][A-Za-z0-9._/-]*[A-Za-z0-9_-]$"
MAX_GOAL_BYTES = 32 * 1024  # README's HTTP API: dispatch caps goal at 32 KiB ...
MAX_CONTEXT_BYTES = 256 * 1024  # ... and context at 256 KiB of JSON
MAX_PAGE = 1000  # larger `limit`s are served as this
MAX_OFFSET = 10**9


def trimmed_non_empty(value: str) -> str:
    """The text without surrounding whitespace; nothing left is invalid."""
    value = value.strip()
    if not value:
        raise ValueError("empty after trim")
    return value


TrimmedText = Annotated[str, AfterValidator(trimmed_non_empty)]
NOT_BLANK = r"\S"  # in the document: a text that is not empty after trim


class SteerBody(BaseModel):
    """`POST /api/v2/sessions/<id>/steer` (README's HTTP API)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # Decision: the text is trimmed before it is accepted, and the trimmed text is what is
    # stored, delivered and compared for clientMsgId de-duplication. "Empty after trim" is
    # invalid (README's HTTP API), so surrounding whitespace carries no meaning; a retry that only
    # differs in a trailing newline is the same message, i.e. a duplicate, not a reuse.
    text: TrimmedText = Field(pattern=NOT_BLANK)
    expectedTurnId: int | None = Field(default=None, ge=0, le=MAX_TURN_ID)
    clientMsgId: str | None = Field(default=None, pattern=CLIENT_MSG_ID_RE.pattern)
    # "interrupt": cut the live turn short and deliver at once (README's Managing steers)
    mode: Literal["queue", "interrupt"] = "queue"


class EditBody(BaseModel):
    """`PATCH /api/v2/sessions/<id>/steers/<offset>` (README's Managing steers): the new text, trimmed."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    text: TrimmedText


class AgentConfigBody(AgentConfig):
    """A dispatch's agentConfig (docs/DEVELOPING.md): each field optional; unset ones come from the
    workflow's own agentConfig, then WORKTRAIN_MODEL / _MAX_OUTPUT_TOKENS / _THINKING_BUDGET.
    A budget at or above the output limit, or below the API's 1024, is a 400 with the reason."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DispatchBody(BaseModel):
    """`POST /api/v2/auto/dispatch` (README's HTTP API)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    workflowId: str = Field(min_length=1, max_length=200)
    goal: TrimmedText = Field(pattern=NOT_BLANK, description=f"At most {MAX_GOAL_BYTES} bytes of UTF-8.")
    workspacePath: str = Field(min_length=1, max_length=4096)
    context: dict[str, Any] | None = Field(
        default=None, description=f"A JSON object of at most {MAX_CONTEXT_BYTES} bytes."
    )
    # "steer": a step whose requireConfirmation holds waits for a steer (docs/workflows.md).
    gates: Literal["skip", "steer"] = "skip"
    # Where the agent works and what becomes of its work (README's Coding sessions)
    branchStrategy: BranchStrategy = Field(
        default="none",
        description="`none`: the workspace as it is; `read-only`: nothing in it can be written; "
        "`worktree`: a git worktree of its own on a new branch.",
    )
    delivery: DeliveryMode = Field(
        default="commit", description="worktree only: `commit` (default), `push`, or `none`."
    )
    baseRef: str | None = Field(
        default=None,
        min_length=1,
        max_length=250,
        pattern=GIT_REV,
        description="worktree: the branch starts here (default HEAD).",
    )
    branch: str | None = Field(
        default=None,
        min_length=1,
        max_length=250,
        pattern=GIT_BRANCH,
        description="worktree: the new branch's name (default worktrain/<sessionId>).",
    )
    keepWorktree: bool = Field(default=False, description="worktree: keep the worktree after delivery.")
    agentConfig: AgentConfigBody | None = Field(
        default=None, description="The session's model, output budget and extended-thinking budget."
    )
    callbackUrl: str | None = Field(
        default=None,
        min_length=1,
        max_length=2048,
        description="An http(s) URL: this session's webhooks (session.finished, session.question, "
        "session.delivered, issue.reported) are POSTed there, and its children's and forks' too "
        "(README's Webhooks).",
    )

    @field_validator("callbackUrl")
    @classmethod
    def _receiver(cls, value: str | None) -> str | None:
        return None if value is None else check_receiver_url(value)

    @field_validator("goal")
    @classmethod
    def _goal_size(cls, value: str) -> str:
        if len(value.encode()) > MAX_GOAL_BYTES:
            raise ValueError("too large")
        return value

    @field_validator("context")
    @classmethod
    def _context_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(json.dumps(value, separators=(",", ":"))) > MAX_CONTEXT_BYTES:
            raise ValueError("too large")
        return value

    @field_validator("baseRef", "branch")
    @classmethod
    def _no_range(cls, value: str | None) -> str | None:
        if value is not None and (".." in value or "//" in value):
            raise ValueError("not a single revision")
        return value

    @field_validator("workspacePath")
    @classmethod
    def _absolute(cls, value: str) -> str:
        # Whether it exists is the worker's business (its host, README's HTTP API); its shape is ours.
        if "\x00" in value or not PurePosixPath(value).is_absolute():
            raise ValueError("must be an absolute path")
        return value


class ForkBody(BaseModel):
    """`POST /api/v2/sessions/<id>/fork` (README's Fork a session, SPEC 3.12)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    turn: int = Field(ge=1, le=MAX_TURN_ID, description="The source's turn the fork carries on after.")
    steer: TrimmedText | None = Field(
        default=None,
        pattern=NOT_BLANK,
        description="What the fork's next turn reads first (at most WORKTRAIN_MAX_STEER_BYTES of UTF-8).",
    )
    agentConfig: AgentConfigBody | None = Field(
        default=None, description="Another model or budgets; unset fields are the source's."
    )
    goal: TrimmedText | None = Field(
        default=None,
        pattern=NOT_BLANK,
        description=f"Another goal (at most {MAX_GOAL_BYTES} bytes of UTF-8).",
    )

    @field_validator("goal")
    @classmethod
    def _goal_size(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > MAX_GOAL_BYTES:
            raise ValueError("too large")
        return value


def parse_fork(raw: bytes) -> ForkBody:
    try:
        return ForkBody.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc, text_field=False) from None


IDEMPOTENCY_HEADER = "Idempotency-Key"


class DispatchHeaders(BaseModel):
    """The request headers of `POST /api/v2/auto/dispatch` that carry meaning (README's HTTP API)."""

    model_config = ConfigDict(frozen=True, strict=True)

    # A retried dispatch with the same key and body answers the first session, never a
    # second one; the same key with another body is refused (422 idempotency_key_reuse).
    idempotency_key: str | None = Field(
        default=None, alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_RE.pattern
    )


def _ascii_int(value: object) -> object:
    """A query integer: ASCII digits only (`int()` would take `٣`, ` 3`, `3_0`)."""
    if isinstance(value, str):
        if not (value.isascii() and value.isdigit() and len(value) <= 12):
            raise ValueError("not an integer")
        return int(value)
    return value


def _at_most(high: int) -> AfterValidator:
    return AfterValidator(lambda value: min(value, high))


Limit = Annotated[
    int,
    Field(ge=1, description=f"Page size (values above {MAX_PAGE} mean {MAX_PAGE})."),
    BeforeValidator(_ascii_int),
    _at_most(MAX_PAGE),
]


class Query(BaseModel):
    """A query string; unknown arguments are ignored, an empty value is "not given"
    (`parse_query` leaves it out, so the default applies)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


def _id_fragment(value: object) -> object:
    if isinstance(value, str):
        fragment = id_fragment(value)
        if fragment is None:
            raise ValueError(f"not the start or end of a session id (at least {MIN_CHARS} characters)")
        return fragment
    return value


class SessionsQuery(Query):
    """`GET /api/v2/sessions`."""

    status: SessionStatus | None = None
    id: Annotated[
        str | None,
        BeforeValidator(_id_fragment),
        Field(
            description="Only the sessions whose id starts or ends with this (a shortened id, `…08KHC25MX27V`"
            " as `worktrain top` shows it: daemon/host/shortids.py)."
        ),
    ] = None
    parent: str | None = Field(
        default=None, pattern=SESSION_ID_RE.pattern, description="Only the children this session spawned."
    )
    limit: Limit = 100
    offset: Annotated[int, Field(ge=0), BeforeValidator(_ascii_int), _at_most(MAX_OFFSET)] = 0


class FleetHistoryQuery(Query):
    """`GET /api/v2/fleet/history`: the samples of the minutes after `since`."""

    since: Annotated[
        int,
        Field(ge=0, description="Seconds since the epoch (a sample's `t`): only later samples."),
        BeforeValidator(_ascii_int),
    ] = 0


class StreamQuery(Query):
    """`GET /api/v2/events` and `/issues`: `since` is a cursor returned as `next`."""

    since: str = Field(default="", max_length=128, description="A cursor returned as `next`.")
    sessionId: str | None = Field(default=None, pattern=SESSION_ID_RE.pattern)
    limit: Limit = 100


class WebhooksQuery(Query):
    """`GET /api/v2/webhooks` (README's Webhooks): the newest deliveries, or only those given up."""

    failed: bool = Field(default=False, description="Only deliveries given up (webhook_failed).")
    limit: Limit = 50


MAX_WAIT_SECONDS = 60  # README's Managing steers (daemon.bus.session.receipts caps it too)

WaitSeconds = Annotated[
    Annotated[
        float, Field(ge=0, allow_inf_nan=False), AfterValidator(lambda value: min(value, MAX_WAIT_SECONDS))
    ]
    | None,
    Field(
        default=None,
        description="Hold the answer until the steer is no longer pending, at most this many seconds "
        "(values above 60 mean 60): a receipt to wait on (README's Managing steers).",
    ),
]


class SteerQuery(Query):
    """`GET /api/v2/sessions/<id>/steers/<offset>`."""

    wait: WaitSeconds = None


class SteersQuery(SteerQuery):
    """`GET /api/v2/sessions/<id>/steers`: steers with an offset above `since` — or, with
    `clientMsgId`, the one steer first accepted with that key."""

    since: Annotated[
        int, Field(ge=0, description="The `next` of the previous page."), BeforeValidator(_ascii_int)
    ] = 0
    limit: Limit = 100
    clientMsgId: str | None = Field(
        default=None, pattern=CLIENT_MSG_ID_RE.pattern, description="Find a steer by its idempotency key."
    )


_FIELD_HINTS: dict[str, str] = {
    "expectedTurnId": f"expectedTurnId must be an integer from 0 to {MAX_TURN_ID}.",
    "clientMsgId": "clientMsgId must be 1-128 characters of [A-Za-z0-9._:-].",
    "workflowId": "workflowId is required and must be a non-empty string.",
    "goal": f"goal is required and must be a non-empty string of at most {MAX_GOAL_BYTES} bytes.",
    "workspacePath": "workspacePath is required and must be an absolute path.",
    "context": f"context must be a JSON object of at most {MAX_CONTEXT_BYTES} bytes.",
    "status": "status must be one of: " + ", ".join(s.value for s in SessionStatus) + ".",
    "limit": "limit must be an integer, at least 1.",
    "offset": "offset must be an integer, at least 0.",
    "sessionId": "sessionId must be a session id (sess_ + 26-char ULID).",
    "since": "since must be a cursor returned as `next`.",
    "wait": "wait must be a number of seconds from 0 to 60.",
    IDEMPOTENCY_HEADER: f"{IDEMPOTENCY_HEADER} must be 1-128 characters of [A-Za-z0-9._:-].",
    "gates": 'gates must be "skip" or "steer".',
    "branchStrategy": 'branchStrategy must be "none", "read-only" or "worktree".',
    "delivery": 'delivery must be "commit", "push" or "none".',
    "baseRef": "baseRef must be a git revision (letters, digits, ._/-~^@).",
    "branch": "branch must be a git branch name (letters, digits, ._/-).",
    "keepWorktree": "keepWorktree must be true or false.",
    "mode": 'mode must be "queue" or "interrupt".',
}


def _message(error: ErrorDetails) -> str:
    loc = error["loc"]
    kind = error["type"]
    if kind == "json_invalid":
        return "Request body is not valid JSON."
    if not loc or kind == "model_type":
        return "Request body must be a JSON object."
    name = str(loc[0])
    if name == "agentConfig" and len(loc) > 1:  # name the field inside (docs/DEVELOPING.md)
        name = ".".join(str(part) for part in loc[:2])
        if kind != "extra_forbidden":
            return f"{name[:64]} is invalid: {error['msg']}."
    if kind == "extra_forbidden":
        return f"Unknown field {name[:64]!r}."
    return _FIELD_HINTS.get(name, f"{name[:64]} is invalid.")


def unknown_fields(errors: list[ErrorDetails], known: Iterable[str]) -> str | None:
    """Every unknown top-level field named at once, each with the known one it is likely meant
    for (`workflow` → workflowId): a body with the wrong names gets that said first, not only
    "workflowId is required" (issue 45)."""
    names = [str(e["loc"][0]) for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if not names:
        return None
    fields = list(known)
    said = []
    for name in names[:8]:
        close = difflib.get_close_matches(name, fields, n=1, cutoff=0.5) or [
            f for f in fields if f.lower().startswith(name.lower())
        ]
        said.append(f"{name[:64]!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return f"Unknown field{'s' if len(names) > 1 else ''} {', '.join(said)}."


def validation_error(exc: ValidationError, text_field: bool, known: Iterable[str] = ()) -> ApiError:
    """The 400 for a body that failed validation. Any `text` error wins (README's HTTP API's
    sentence); unknown fields are all named (with the field meant, among `known`), then the
    first other error."""
    errors = exc.errors(include_url=False, include_input=False)
    if text_field and any(e["loc"][:1] == ("text",) for e in errors):
        return invalid_request(TEXT_REQUIRED)
    extra = unknown_fields(errors, known)
    others = [e for e in errors if not (e["type"] == "extra_forbidden" and len(e["loc"]) == 1)]
    if extra is None:
        return invalid_request(_message(errors[0]))
    return invalid_request(f"{extra} {_message(others[0])}" if others else extra)


def parse_steer(raw: bytes) -> SteerBody:
    try:
        return SteerBody.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc, text_field=True) from None


def parse_edit(raw: bytes) -> EditBody:
    try:
        return EditBody.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc, text_field=True) from None


def parse_dispatch(raw: bytes) -> DispatchBody:
    try:
        return DispatchBody.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc, text_field=False, known=DispatchBody.model_fields) from None


class HeaderSource(Protocol):
    def get(self, key: str) -> str | None: ...


def parse_dispatch_headers(headers: HeaderSource) -> DispatchHeaders:
    """The dispatch headers (a header given twice counts as its first value)."""
    raw = headers.get(IDEMPOTENCY_HEADER)
    try:
        return DispatchHeaders.model_validate({} if raw is None else {IDEMPOTENCY_HEADER: raw})
    except ValidationError as exc:
        raise validation_error(exc, text_field=False) from None


QueryModel = TypeVar("QueryModel", bound=Query)


def parse_query(model: type[QueryModel], args: Mapping[str, str]) -> QueryModel:
    """The query string (first value of each argument) as `model`; 400 when invalid."""
    try:
        return model.model_validate({name: value for name, value in args.items() if value != ""})
    except ValidationError as exc:
        raise validation_error(exc, text_field=False) from None


class SignalsQuery(Query):
    """`GET /api/v2/sessions/<id>/signals` (README's Sub-agents and questions): signals with an offset
    above `since`;
    with `wait`, when there is none yet, the first that comes within that many seconds."""

    since: Annotated[
        int, Field(ge=0, description="The `next` of the previous page."), BeforeValidator(_ascii_int)
    ] = 0
    limit: Limit = 100
    wait: Annotated[
        Annotated[
            float,
            Field(ge=0, allow_inf_nan=False),
            AfterValidator(lambda value: min(value, MAX_WAIT_SECONDS)),
        ]
        | None,
        Field(
            default=None,
            description="Hold the answer until a signal comes, at most this many seconds (above 60 mean 60).",
        ),
    ] = None
