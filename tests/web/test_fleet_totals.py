"""`GET /api/v2/fleet`'s totals (issue 33): a model call abandoned on purpose (an interrupt
steer, a cancel, a stop) is `interrupted`, as `/metrics` says, and never counted as failed."""

from __future__ import annotations

import pytest
import redis

from daemon.bus.fleet.metrics import MODEL_CALLS, MetricsRecorder
from tests.web.conftest import Web

pytestmark = pytest.mark.unit


def test_interrupted_model_calls_are_not_failed(real_web: Web, real_redis: redis.Redis) -> None:
    recorder = MetricsRecorder(real_redis, real_web.keys, background=False)
    recorder.count(MODEL_CALLS, 34, result="ok")
    recorder.count(MODEL_CALLS, 2, result="interrupted")
    recorder.count(MODEL_CALLS, 1, result="api_error")
    recorder.count(MODEL_CALLS, 1, result="error")
    assert recorder.flush()
    totals = real_web.http.get("/api/v2/fleet").get_json()["data"]["totals"]
    assert (totals["modelCalls"], totals["modelCallErrors"], totals["modelCallsInterrupted"]) == (38, 2, 2)
    scrape = real_web.http.get("/metrics").get_data(as_text=True)
    assert 'worktrain_model_calls_total{result="interrupted"} 2.0' in scrape
