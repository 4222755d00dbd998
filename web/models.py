"""Request bodies (pydantic, strict) and how their validation errors become 400 answers.

Bodies are validated straight from the raw bytes (`model_validate_json`: one pass in
pydantic-core, no intermediate dict). Strict mode: `true` is not an integer, `1.0` is not
an integer, `"1"` is not an integer, `null` is "not given" for the optional fields only.
Unknown fields are refused: a typo such as `expectedTurnID` would otherwise silently turn
a compare-and-swap steer into an unconditional one.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails

from daemon.ids import CLIENT_MSG_ID_RE, IDEMPOTENCY_KEY_RE
from web.errors import ApiError, invalid_request

TEXT_REQUIRED = "text is required and must be a non-empty string."
# Turn ids are small ordinals (200 turns by default); the cap keeps the value exact in Lua's
# doubles and refuses absurd input instead of passing it to Redis.
MAX_TURN_ID = 2**31 - 1


def trimmed_non_empty(value: str) -> str:
    """The text without surrounding whitespace; nothing left is invalid."""
    value = value.strip()
    if not value:
        raise ValueError("empty after trim")
    return value


TrimmedText = Annotated[str, AfterValidator(trimmed_non_empty)]


class SteerBody(BaseModel):
    """`POST /api/v2/sessions/<id>/steer` (SPEC §3.1)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    # Decision: the text is trimmed before it is accepted, and the trimmed text is what is
    # stored, delivered and compared for clientMsgId de-duplication. "Empty after trim" is
    # invalid (SPEC §3.1), so surrounding whitespace carries no meaning; a retry that only
    # differs in a trailing newline is the same message, i.e. a duplicate, not a reuse.
    text: TrimmedText
    expectedTurnId: int | None = Field(default=None, ge=0, le=MAX_TURN_ID)
    clientMsgId: str | None = Field(default=None, pattern=CLIENT_MSG_ID_RE.pattern)


class DispatchBody(BaseModel):
    """`POST /api/v2/auto/dispatch` (SPEC §3.3)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    workflowId: str = Field(min_length=1, max_length=200)
    goal: TrimmedText = Field(min_length=1)
    workspacePath: str = Field(min_length=1, max_length=4096)
    context: dict[str, Any] | None = None
    # "steer": a step whose requireConfirmation holds waits for a steer (SPEC §4.4).
    gates: Literal["skip", "steer"] = "skip"

    @field_validator("workspacePath")
    @classmethod
    def _absolute(cls, value: str) -> str:
        # Whether it exists is the worker's business (its host, SPEC §3.3); its shape is ours.
        if "\x00" in value or not PurePosixPath(value).is_absolute():
            raise ValueError("must be an absolute path")
        return value


IDEMPOTENCY_HEADER = "Idempotency-Key"


class DispatchHeaders(BaseModel):
    """The request headers of `POST /api/v2/auto/dispatch` that carry meaning (SPEC §3.3)."""

    model_config = ConfigDict(frozen=True, strict=True)

    # A retried dispatch with the same key and body answers the first session, never a
    # second one; the same key with another body is refused (422 idempotency_key_reuse).
    idempotency_key: str | None = Field(
        default=None, alias="Idempotency-Key", pattern=IDEMPOTENCY_KEY_RE.pattern
    )


_FIELD_HINTS: dict[str, str] = {
    "expectedTurnId": f"expectedTurnId must be an integer from 0 to {MAX_TURN_ID}.",
    "clientMsgId": "clientMsgId must be 1-128 characters of [A-Za-z0-9._:-].",
    "workflowId": "workflowId is required and must be a non-empty string.",
    "goal": "goal is required and must be a non-empty string.",
    "workspacePath": "workspacePath is required and must be an absolute path.",
    "context": "context must be a JSON object.",
    IDEMPOTENCY_HEADER: f"{IDEMPOTENCY_HEADER} must be 1-128 characters of [A-Za-z0-9._:-].",
    "gates": 'gates must be "skip" or "steer".',
}


def _message(error: ErrorDetails) -> str:
    loc = error["loc"]
    kind = error["type"]
    if kind == "json_invalid":
        return "Request body is not valid JSON."
    if not loc or kind == "model_type":
        return "Request body must be a JSON object."
    name = str(loc[0])
    if kind == "extra_forbidden":
        return f"Unknown field {name[:64]!r}."
    return _FIELD_HINTS.get(name, f"{name[:64]} is invalid.")


def validation_error(exc: ValidationError, text_field: bool) -> ApiError:
    """The 400 for a body that failed validation. Any `text` error wins (SPEC §3.1's sentence)."""
    errors = exc.errors(include_url=False, include_input=False)
    if text_field and any(e["loc"][:1] == ("text",) for e in errors):
        return invalid_request(TEXT_REQUIRED)
    return invalid_request(_message(errors[0]))


def parse_steer(raw: bytes) -> SteerBody:
    try:
        return SteerBody.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc, text_field=True) from None


def parse_dispatch(raw: bytes) -> DispatchBody:
    try:
        return DispatchBody.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_error(exc, text_field=False) from None


class HeaderSource(Protocol):
    def get(self, key: str) -> str | None: ...


def parse_dispatch_headers(headers: HeaderSource) -> DispatchHeaders:
    """The dispatch headers (a header given twice counts as its first value)."""
    raw = headers.get(IDEMPOTENCY_HEADER)
    try:
        return DispatchHeaders.model_validate({} if raw is None else {IDEMPOTENCY_HEADER: raw})
    except ValidationError as exc:
        raise validation_error(exc, text_field=False) from None
