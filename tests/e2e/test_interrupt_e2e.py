"""An interrupt steer end to end, real processes: `worktrain steer --mode interrupt --wait`
against `worktrain web`, a `worktrain worker` whose horse listens for interrupts, and the
fake model holding every call. The worker must send the next request, carrying the steer,
while turn 1's call is still held — well before the lease heartbeat (10 s here) could
have told it — and the receipt names turn 2; when the held call then answers, nothing of
it is kept."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import redis

from tests.e2e.test_steer_e2e import ROOT, TOKEN, Stack, dispatch_two_step, http, wait_until

pytestmark = pytest.mark.e2e

STEER = "Stop: take the other approach."


def test_interrupt_through_the_cli_and_real_processes(stack: Stack) -> None:
    api = f"{stack.web_url}/api/v2"
    sid = dispatch_two_step(api, stack.tmp / "ws")
    requests = lambda: http("GET", f"{stack.model_url}/_fake/requests")[1]["requests"]  # noqa: E731
    wait_until(lambda: len(requests()) == 1, "turn 1's call", procs=stack.procs)
    wait_until(lambda: http("GET", f"{api}/sessions/{sid}")[1]["data"]["turnId"] == 1, "live turn 1")

    env = {**stack.env, "WORKTRAIN_URL": stack.web_url, "WORKTRAIN_API_TOKEN": TOKEN}
    sent = time.monotonic()
    steer = subprocess.Popen(
        [sys.executable, "-m", "cli", "steer", sid, STEER, "--mode", "interrupt", "--wait", "--json"],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_until(lambda: len(requests()) == 2, "the request after the interrupt", timeout=20, procs=stack.procs)
    latency = time.monotonic() - sent
    print(f"interrupt end to end (CLI start included): next request after {latency * 1000:.0f} ms")
    assert latency < 5, stack.logs()  # the heartbeat alone would take 10 s
    second = requests()[1]
    assert second["messages"][-1]["content"][-1]["text"] == STEER
    assert len(second["messages"]) == 1  # the abandoned reply is not in it

    assert http("POST", f"{stack.model_url}/_fake/release", {})[0] == 200  # both held calls answer
    out, err = steer.communicate(timeout=30)
    assert steer.returncode == 0, err
    receipt = json.loads(out)["receipt"]
    assert (receipt["state"], receipt["deliveredTurnId"]) == ("delivered", 2)
    final = wait_until(
        lambda: (r := http("GET", f"{api}/sessions/{sid}")[1]["data"])["status"] == "completed" and r,
        "the session to complete",
        procs=stack.procs,
    )
    assert final["outcome"] == "workflow_complete"
    client = redis.Redis.from_url(stack.redis.url, decode_responses=True)
    history = [json.loads(raw) for raw in client.lrange(f"wt:session:{{{sid}}}:history", 0, -1)]  # type: ignore[union-attr]
    # turn 1's reply never entered the history: the first assistant message answers the steer
    assert history[0]["content"][-1]["text"] == STEER
    sent = [{k: v for k, v in m.items() if k != "meta"} for m in history]  # what the model is sent
    assert json.dumps(sent).count(STEER) == 1 + json.dumps(sent[1:]).count(STEER)
    kinds = [json.loads(f["data"])["kind"] for _, f in client.xrange(f"wt:session:{{{sid}}}:events")]  # type: ignore[union-attr]
    assert (
        kinds.count("turn_interrupted") == 1 and kinds.count("llm_turn_completed") == final["turnCount"] - 1
    )
    client.close()
