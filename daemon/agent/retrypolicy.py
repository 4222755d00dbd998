"""When a failed model call is tried again, and after how long (docs/DEVELOPING.md). Pure: no I/O, no clock.

The worker, not the SDK, owns retries, so that a session rides out minutes of API weather
(a 529 "overloaded", a 429 while a fleet shares one organisation's rate limit) instead of
failing after the SDK's ~2 s of backoff. This module only decides; the waiting happens at
the edge (daemon/agent/modelcall.py), where a cancel, a stop or a lost lease can cut it short.

- `classify` says what a failure is: worth retrying, the prompt being too long (which the
  compactor answers, docs/DEVELOPING.md), or final;
- `retry_after_seconds` reads the server's own advice (`retry-after-ms`, `retry-after`);
- `next_wait` turns a failure into a wait: the server's advice when given, else exponential
  backoff with full jitter from 1 s up to 60 s, within the turn's retry budget.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum

RETRYABLE_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
BACKOFF_BASE_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 60.0
# The API's words for a request over the context window (the second: input + max_tokens)
TOO_LONG_PHRASES = ("prompt is too long", "exceed context limit")

# An error event inside a 200 stream carries no status of its own: the status its type
# stands for when the API answers it before the stream starts (docs.anthropic.com/en/api/errors).
STREAM_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


class Verdict(StrEnum):
    RETRY = "retry"  # wait, then call again (within the budget)
    PROMPT_TOO_LONG = "prompt_too_long"  # compact the history, then call again once
    FAIL = "fail"  # end the session: model_error


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed model call, as the adapter saw it."""

    status: int | None  # HTTP status (the one its type stands for, mid-stream); None: no answer
    error_type: str = ""  # `error.type` of the API's body, or `connection` / `timeout`
    message: str = ""
    retry_after: float | None = None  # seconds the server asked for, if it did

    @property
    def timed_out(self) -> bool:
        return self.error_type == "timeout"

    def describe(self) -> str:
        what = f"model API error {self.status}" if self.status is not None else "model API unreachable"
        detail = ": ".join(part for part in (self.error_type, self.message) if part)
        return f"{what}: {detail}" if detail else what


def effective_status(status: int | None, error_type: str | None) -> int | None:
    """The status a failure stands for: an error event mid-stream arrives on a 200."""
    if status is not None and status >= 400:
        return status
    if error_type and error_type in STREAM_ERROR_STATUS:
        return STREAM_ERROR_STATUS[error_type]
    return None if status is None else 500  # a 2xx that failed anyway: the server's fault


def classify(failure: Failure) -> Verdict:
    """Connection errors and timeouts (status None) and the SPEC's statuses are retried; a
    400 saying the prompt is too long is the compactor's; every other 4xx is final."""
    if failure.status is None or failure.status in RETRYABLE_STATUSES:
        return Verdict.RETRY
    if failure.status == 400 and any(phrase in failure.message.lower() for phrase in TOO_LONG_PHRASES):
        return Verdict.PROMPT_TOO_LONG
    if failure.status >= 500:
        return Verdict.RETRY  # any other 5xx is the server's trouble too
    return Verdict.FAIL


def retry_after_seconds(headers: Mapping[str, str], now: datetime | None = None) -> float | None:
    """The wait the server asks for: `retry-after-ms` (Anthropic's, in ms), else `retry-after`
    (seconds, or an HTTP date). None when neither is there or neither parses."""
    lowered = {name.lower(): value for name, value in headers.items()}
    raw_ms = lowered.get("retry-after-ms")
    if raw_ms is not None:
        try:
            return max(float(raw_ms) / 1000.0, 0.0)
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - (now or datetime.now(UTC))).total_seconds(), 0.0)


def backoff_ceiling(attempt: int) -> float:
    """The longest wait after the `attempt`-th failed call: 1, 2, 4, ... capped at 60 s."""
    exponent = min(max(attempt - 1, 0), 16)
    return min(BACKOFF_BASE_SECONDS * 2.0**exponent, BACKOFF_CAP_SECONDS)


def next_wait(
    failure: Failure,
    attempt: int,
    spent: float,
    budget: float,
    rng: random.Random | None = None,
) -> float | None:
    """How long to wait before calling again, or None: give up now.

    `attempt` counts the failed calls of this turn (1 for the first), `spent` the seconds
    since the first of them, `budget` WORKTRAIN_MODEL_RETRY_SECONDS. The server's advice is
    followed as given; when it asks for more than the budget has left, the call would fail
    again, so this gives up instead. A backoff is "full jitter" (uniform between 0 and the
    ceiling: retries of a fleet spread out instead of arriving together), clipped to the
    budget's end so that the last try happens at the deadline.
    """
    left = budget - spent
    if left <= 0:
        return None
    if failure.retry_after is not None:
        return failure.retry_after if failure.retry_after <= left else None
    wait = (rng or random).uniform(0.0, backoff_ceiling(attempt))
    return min(wait, left)
