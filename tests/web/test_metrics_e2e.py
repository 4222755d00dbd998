"""`GET /metrics` on a real stack (docs/operations.md): redis-server, `worktrain web`, `worktrain worker`
processes and the fake model. The exposition parses with prometheus_client's own parser; after
N steers, retries and model calls the counters moved by exactly N; histogram counts equal the
events; a web restart keeps the totals; a second worker process (its own connections) counts,
and shows in `GET /api/v2/workers`.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon.fakemodel import overloaded
from tests.crash.harness import TOKEN, Stack, stacks, wait_until

pytestmark = pytest.mark.e2e

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def make_stack(tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    yield from stacks(tmp_path, Stack)


def scrape(stack: Stack, token: str | None = TOKEN) -> tuple[int, str]:
    import urllib.error
    import urllib.request

    headers = {"authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(stack.url + "/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(stack: Stack) -> Samples:
    status, text = scrape(stack)
    assert status == 200, text
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def total(found: Samples, name: str, **labels: str) -> float:
    want = set(labels.items())
    return sum(v for (n, key), v in found.items() if n == name and want <= set(key))


def settled(stack: Stack, check: Callable[[Samples], bool], what: str) -> Samples:
    """Metrics flush once a second: wait until `check` holds."""
    box: dict[str, Samples] = {}

    def ready() -> bool:
        box["s"] = samples(stack)
        return check(box["s"])

    try:
        wait_until(ready, what, timeout=15, every=0.2)
    except TimeoutError:
        raise AssertionError(f"{what}: {box.get('s')}") from None
    return box["s"]


def expected_from_events(stack: Stack, sid: str) -> dict[str, Any]:
    events = stack.events(sid)
    llm = [e for e in events if e["kind"] == "llm_turn_completed"]
    tools: dict[str, int] = {}
    for e in events:
        if e["kind"] == "tool_call_completed":
            tools[e["toolName"]] = tools.get(e["toolName"], 0) + 1
    return {
        "calls": len(stack.model.requests_of(sid)),
        "ok": len(llm),
        "input": sum(e["inputTokens"] for e in llm),
        "output": sum(e["outputTokens"] for e in llm),
        "tools": tools,
        "delivered": sum(len(e["offsets"]) for e in events if e["kind"] == "steer_delivered"),
    }


def test_metrics_count_every_event_and_survive_a_web_restart(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(concurrency=4).start()
    stack.model.server.script.extend([overloaded(0.2), overloaded(0.2)])  # two retries, then the rule
    stack.model.hold_when = lambda sid, n: n == 1
    assert scrape(stack, token=None)[0] == 401  # behind the token

    before = samples(stack)
    assert value(before, "worktrain_steers_total", outcome="accepted") == 0
    sid = stack.dispatch()
    wait_until(lambda: stack.model.held(sid), "the first answered call, held")
    steers = 3
    for i in range(steers):
        assert stack.steer(sid, f"steer {i}", client_msg_id=f"m-{i}").body["status"] == "accepted"
    assert stack.steer(sid, "steer 0", client_msg_id="m-0").body["status"] == "duplicate"
    stale = stack.http("POST", f"/api/v2/sessions/{sid}/steer", {"text": "x", "expectedTurnId": 99})
    assert stale.status == 409
    stack.model.release(sid)
    done = stack.wait_finished(sid)
    assert done["status"] == "completed", stack.logs()

    want = expected_from_events(stack, sid)
    assert want["delivered"] == steers and want["calls"] == want["ok"] + 2

    def counted(s: Samples) -> bool:
        return (
            value(s, "worktrain_model_calls_total", result="ok") == want["ok"]
            and value(s, "worktrain_tokens_total", kind="output") == want["output"]
            and value(s, "worktrain_steer_delivery_seconds_count") == steers
            # the last turn's tool calls are counted after its model call: maybe a flush later
            and all(
                value(s, "worktrain_tool_calls_total", tool=tool, result="ok") == count
                for tool, count in want["tools"].items()
            )
        )

    found = settled(stack, counted, "the worker's counts flushed")
    assert value(found, "worktrain_steers_total", outcome="accepted") == steers
    assert value(found, "worktrain_steers_total", outcome="duplicate") == 1
    assert value(found, "worktrain_steers_total", outcome="stale_turn") == 1
    assert value(found, "worktrain_steer_accept_seconds_count") == steers
    assert value(found, "worktrain_steer_accept_seconds_bucket", le="+Inf") == steers
    assert value(found, "worktrain_model_retries_total", status="529") == 2
    assert value(found, "worktrain_model_calls_total", result="api_error") == 2
    assert total(found, "worktrain_model_calls_total") == want["calls"]
    assert value(found, "worktrain_model_call_seconds_count") == want["calls"]
    assert value(found, "worktrain_tokens_total", kind="input") == want["input"]
    for tool, count in want["tools"].items():
        assert value(found, "worktrain_tool_calls_total", tool=tool, result="ok") == count, tool
    assert value(found, "worktrain_sessions", status="completed") == 1
    assert value(found, "worktrain_workers") == 1
    assert value(found, "worktrain_queue_depth") == 0

    # a web restart loses nothing: the totals live in Redis
    web = stack.proc("web")
    web.process.send_signal(signal.SIGTERM)
    web.process.wait(15)
    stack.start_web()
    again = samples(stack)
    for name, labels in (
        ("worktrain_steers_total", {"outcome": "accepted"}),
        ("worktrain_model_calls_total", {"result": "ok"}),
        ("worktrain_steer_delivery_seconds_count", {}),
        ("worktrain_tokens_total", {"kind": "output"}),
    ):
        assert value(again, name, **labels) == value(found, name, **labels), name


def test_a_second_worker_process_is_counted_and_listed(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(concurrency=2).start()
    second = stack.start_worker("worker2", concurrency=2)
    workers = wait_until(
        lambda: len(w := stack.http("GET", "/api/v2/workers").body["data"]["workers"]) == 2 and w,
        "two workers listed",
        timeout=15,
    )
    pids = {w["pid"] for w in workers}
    assert len(pids) == 2
    for w in workers:
        layers = w["sandbox"]
        assert w["concurrency"] == 2 and layers["pid_namespace"].startswith(("on", "off"))
        assert {"landlock", "capabilities", "no_new_privs", "network", "ipc_namespace"} <= set(layers), layers
        assert layers["seccomp"].startswith(("on", "missing")), layers  # reported like the others
    first = stack.proc("worker1")
    first.process.send_signal(signal.SIGTERM)  # from now on only worker2 runs sessions
    first.process.wait(20)
    wait_until(
        lambda: len(stack.http("GET", "/api/v2/workers").body["data"]["workers"]) == 1,
        "the stopped worker leaves the list",
        timeout=15,
    )
    stack.model.hold_when = lambda sid, n: n == 2
    sid = stack.dispatch()
    wait_until(lambda: stack.model.held(sid), "worker2's session mid-run")
    [live] = wait_until(  # a worker publishes what it runs once a second
        lambda: (
            (w := stack.http("GET", "/api/v2/workers").body["data"]["workers"]) and w[0]["sessions"] and w
        ),
        "worker2 lists its session",
        timeout=15,
    )
    assert live["sessions"] == [sid] and second.process.poll() is None
    stack.model.release(sid)
    assert stack.wait_finished(sid)["status"] == "completed", stack.logs()
    calls = len(stack.model.requests_of(sid))
    found = settled(
        stack,
        lambda s: value(s, "worktrain_model_calls_total", result="ok") == calls,
        "worker2's model calls counted",
    )
    assert value(found, "worktrain_workers") == 1
    fleet = stack.http("GET", "/api/v2/fleet").body["data"]
    assert fleet["totals"]["modelCalls"] == calls and fleet["workers"] == 1
    assert fleet["sessions"]["completed"] == 1


def test_a_forking_worker_publishes_its_presence_and_its_horses_count(
    make_stack: Callable[..., Stack],
) -> None:
    """`--concurrency 1`: the RQ worker process is listed with the session its work horse
    runs, and what the horse counted (its own recorder, flushed when it ends) is in /metrics."""
    stack = make_stack(concurrency=1).start()
    stack.model.hold_when = lambda sid, n: n == 1
    sid = stack.dispatch()
    wait_until(lambda: stack.model.held(sid), "the horse's first call, held")
    [worker] = wait_until(
        lambda: (
            (w := stack.http("GET", "/api/v2/workers").body["data"]["workers"]) and w[0]["sessions"] and w
        ),
        "the worker lists its session",
        timeout=15,
    )
    assert worker["sessions"] == [sid] and worker["concurrency"] == 1
    in_flight = settled(
        stack, lambda s: value(s, "worktrain_model_calls_in_flight") == 1, "the horse's call in flight"
    )
    assert value(in_flight, "worktrain_worker_sessions", worker=worker["id"]) == 1
    stack.model.release(sid)
    assert stack.wait_finished(sid)["status"] == "completed", stack.logs()
    calls = len(stack.model.requests_of(sid))
    settled(
        stack, lambda s: value(s, "worktrain_model_calls_total", result="ok") == calls, "the horse's counts"
    )
