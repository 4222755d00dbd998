"""The retry policy (daemon/agent/retrypolicy.py): pure decisions, no clock, no I/O."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daemon.agent.retrypolicy import (
    BACKOFF_CAP_SECONDS,
    Failure,
    Verdict,
    backoff_ceiling,
    classify,
    effective_status,
    next_wait,
    retry_after_seconds,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504, 529, 501, 599, None])
def test_the_weather_is_retried(status: int | None) -> None:
    assert classify(Failure(status)) is Verdict.RETRY


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_client_errors_are_final(status: int) -> None:
    assert classify(Failure(status, "invalid_request_error", "nope")) is Verdict.FAIL


@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 201234 tokens > 200000 maximum",
        "Prompt is too long",
        "input length and `max_tokens` exceed context limit: 197000 + 8192 > 200000",
    ],
)
def test_a_prompt_too_long_is_the_compactors(message: str) -> None:
    assert classify(Failure(400, "invalid_request_error", message)) is Verdict.PROMPT_TOO_LONG


def test_an_error_event_inside_a_200_stream_stands_for_its_types_status() -> None:
    assert effective_status(200, "overloaded_error") == 529
    assert effective_status(200, "rate_limit_error") == 429
    assert effective_status(200, "invalid_request_error") == 400
    assert effective_status(200, "something_new") == 500  # a 2xx that failed: the server's
    assert effective_status(503, "overloaded_error") == 503  # a real status wins
    assert effective_status(None, "") is None


def test_retry_after_headers() -> None:
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"Retry-After": "3"}) == 3.0
    assert retry_after_seconds({"retry-after": "0.25"}) == 0.25
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    date = format_datetime(now + timedelta(seconds=7), usegmt=True)
    assert retry_after_seconds({"retry-after": date}, now=now) == 7.0
    assert (
        retry_after_seconds({"retry-after": format_datetime(now - timedelta(seconds=7), usegmt=True)}, now)
        == 0
    )
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after-ms": "x"}) is None
    assert retry_after_seconds({}) is None


def test_the_servers_advice_is_followed_within_the_budget() -> None:
    asked = Failure(429, retry_after=3.0)
    assert next_wait(asked, attempt=1, spent=0.0, budget=600.0) == 3.0
    assert next_wait(asked, attempt=7, spent=598.0, budget=600.0) is None  # it would fail again
    assert next_wait(asked, attempt=7, spent=597.0, budget=600.0) == 3.0


def test_backoff_is_full_jitter_up_to_a_ceiling_that_doubles_to_60s() -> None:
    assert [backoff_ceiling(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, 60, 60]
    assert backoff_ceiling(10_000) == BACKOFF_CAP_SECONDS
    rng = random.Random(11)
    waits = [next_wait(Failure(529), 3, 0.0, 600.0, rng) for _ in range(2000)]
    assert all(w is not None and 0.0 <= w <= 4.0 for w in waits)
    assert min(waits) < 0.1 and max(waits) > 3.9  # spread over the whole range  # type: ignore[operator]


def test_backoff_ends_at_the_deadline_and_then_gives_up() -> None:
    assert next_wait(Failure(503), 12, spent=599.5, budget=600.0, rng=random.Random(1)) <= 0.5  # type: ignore[operator]
    assert next_wait(Failure(503), 12, spent=600.0, budget=600.0) is None
    assert next_wait(Failure(503), 1, spent=0.0, budget=0.0) is None  # retries off


@given(
    attempt=st.integers(1, 100),
    spent=st.floats(0, 1000, allow_nan=False),
    budget=st.floats(0, 1000, allow_nan=False),
    advice=st.none() | st.floats(0, 120, allow_nan=False),
    seed=st.integers(0, 2**32),
)
def test_a_wait_never_passes_the_budget_nor_the_ceiling(
    attempt: int, spent: float, budget: float, advice: float | None, seed: int
) -> None:
    wait = next_wait(Failure(529, retry_after=advice), attempt, spent, budget, random.Random(seed))
    if wait is None:
        assert spent >= budget or (advice is not None and advice > budget - spent)
        return
    assert 0.0 <= wait <= budget - spent
    assert wait == advice if advice is not None else wait <= backoff_ceiling(attempt)


def test_a_failure_describes_itself() -> None:
    assert Failure(529, "overloaded_error", "Overloaded").describe() == (
        "model API error 529: overloaded_error: Overloaded"
    )
    assert Failure(None, "connection", "refused").describe() == "model API unreachable: connection: refused"
    assert Failure(None, "timeout").timed_out
