"""Retract and edit racing the drain (README's Managing steers), on a real Redis, through the real loop.

Each round is one session run by `run_session` with a scripted model that calls a tool
every turn (so the loop drains at a turn end every millisecond or two), while one thread
accepts steers and four others retract and edit them at random. Afterwards, for every
steer: it is either delivered — in the history the model was sent exactly once, with the
text it was accepted with or its last successful edit — or retracted and nowhere in the
history (or, accepted at the very end, undelivered), never both and never twice; every
retract or edit that answered success happened to a steer the model never saw in its old
form; and the journal says the same. Seeded: WORKTRAIN_RACE_SEED replays a run,
WORKTRAIN_RACE_ROUNDS runs more rounds (the default suite runs `DEFAULT_ROUNDS`).
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from daemon.agent.model import ModelRequest
from daemon.bus.session.receipts import SteerReceipts
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SteerBus, SteerChange
from daemon.bus.streams.eventsink import EventSink
from daemon.fakemodel import ScriptedModel, reply, tool
from daemon.turn.messages import TextBlock
from tests.agent.conftest import NOTES, Harness, RecordingEvents

pytestmark = pytest.mark.unit

DEFAULT_ROUNDS = 120
STEERS = 12
EDITORS = 4
OPS_PER_EDITOR = 8
TOKEN = re.compile(r"steer (\d+) v(\d+)")


@dataclass
class Round:
    """What the coordinator threads did in one round."""

    accepted: dict[int, str] = field(default_factory=dict)  # offset -> accepted text
    edits: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))  # successful, in order
    retracted: Counter[int] = field(default_factory=Counter)  # successful retracts per offset
    refused: Counter[int] = field(default_factory=Counter)  # not_pending answers
    lock: threading.Lock = field(default_factory=threading.Lock)


def model_for(done: threading.Event, rng: random.Random) -> ScriptedModel:
    """A tool call every turn, a little model latency; two continue_workflow once `done`."""
    pause = [rng.uniform(0, 0.002) for _ in range(4096)]
    calls = iter(range(10**9))

    def answer(request: ModelRequest):
        time.sleep(pause[next(calls) % len(pause)])
        if done.is_set():
            return reply(tool("continue_workflow", notes=NOTES))
        return reply(tool("Read", path="README.md"))

    return ScriptedModel(rule=answer)


def coordinate(bus: SteerBus, sid: str, rng: random.Random, started: threading.Event) -> Round:
    done = Round()
    versions = iter(range(1, 10**9))
    seeds = [rng.randrange(2**32) for _ in range(EDITORS)]

    def accept() -> None:
        started.wait(5)
        for _ in range(STEERS):
            offset = len(done.accepted) + 1
            text = f"steer {offset} v0"
            result = bus.accept(sid, text)
            assert result.ref is not None and result.ref.offset == offset
            with done.lock:
                done.accepted[offset] = text
            time.sleep(rng.uniform(0, 0.003))

    def edit(seed: int) -> None:
        local = random.Random(seed)
        started.wait(5)
        for _ in range(OPS_PER_EDITOR):
            time.sleep(local.uniform(0, 0.004))
            with done.lock:
                known = list(done.accepted)
            if not known:
                continue
            offset = local.choice(known)
            if local.random() < 0.4:
                outcome = bus.retract(sid, offset).change
                with done.lock:
                    if outcome is SteerChange.RETRACTED:
                        done.retracted[offset] += 1
                    else:
                        done.refused[offset] += 1
                continue
            with done.lock:  # the version is taken and, on success, recorded under one lock,
                text = f"steer {offset} v{next(versions)}"  # so `edits` is in commit order
                outcome = bus.edit(sid, offset, text).change
                if outcome is SteerChange.EDITED:
                    done.edits[offset].append(text)
            assert outcome in (SteerChange.EDITED, SteerChange.NOT_PENDING)

    threads = [threading.Thread(target=accept)] + [threading.Thread(target=edit, args=(s,)) for s in seeds]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return done


def seen_texts(harness: Harness) -> list[str]:
    """Every steer text in the history the model was sent (each delivery block split)."""
    found = []
    for message in harness.history():
        if message.role != "user":
            continue
        for block in message.content:
            if isinstance(block, TextBlock):
                found.extend(m.group(0) for m in TOKEN.finditer(block.text))
    return found


def check_round(harness: Harness, done: Round) -> dict[str, int]:
    seen = Counter(seen_texts(harness))
    by_offset: dict[int, list[str]] = defaultdict(list)
    for text, count in seen.items():
        assert count == 1, f"{text!r} reached the model {count} times"
        by_offset[int(TOKEN.match(text).group(1))].append(text)  # type: ignore[union-attr]
    views = {v.offset: v for v in SteerReceipts(harness.bus).folded(harness.session_id).fold.sorted()}
    assert set(views) == set(done.accepted)
    tally = Counter()
    for offset, accepted in done.accepted.items():
        view = views[offset]
        texts = by_offset.get(offset, [])
        assert len(texts) <= 1, f"offset {offset} seen as {texts}"
        assert done.retracted[offset] <= 1, f"offset {offset} retracted {done.retracted[offset]} times"
        tally[view.state] += 1
        if view.state == "delivered":
            assert done.retracted[offset] == 0, f"offset {offset} delivered and retracted"
            expected = done.edits[offset][-1] if done.edits[offset] else accepted
            assert texts == [expected] == [view.text], (offset, texts, expected, view.text)
        else:
            assert not texts, f"offset {offset} is {view.state} but the model saw {texts}"
            assert view.state in ("retracted", "undelivered")
            assert (view.state == "retracted") == (done.retracted[offset] == 1)
        assert view.edits == len(done.edits[offset])
    tally["edits"] = sum(len(v) for v in done.edits.values())
    tally["retracts_refused"] = sum(done.refused.values())
    return tally


@pytest.fixture
def race_harness(real_redis: redis.Redis, keys, tmp_path: Path) -> Harness:
    bus = SteerBus(real_redis, keys, retention_seconds=3600)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "README.md").write_text("# race\n")
    events = RecordingEvents(EventSink(real_redis, keys, None))
    return Harness(bus, SessionRegistry(real_redis, keys), workspace, tmp_path / "data", events=events)


def test_retract_and_edit_race_the_drain(race_harness: Harness) -> None:
    seed = int(os.environ.get("WORKTRAIN_RACE_SEED") or random.randrange(10**6))
    rounds = int(os.environ.get("WORKTRAIN_RACE_ROUNDS") or DEFAULT_ROUNDS)
    rng = random.Random(seed)
    totals: Counter[str] = Counter()
    for _ in range(rounds):
        race_harness.create()
        done_steering = threading.Event()
        started = threading.Event()
        model = model_for(done_steering, rng)
        outcome: list[str] = []
        worker = threading.Thread(target=lambda m=model, out=outcome: out.append(race_harness.run(m)))
        worker.start()
        while not model.requests and worker.is_alive():
            time.sleep(0.0005)
        started.set()
        done = coordinate(race_harness.bus, race_harness.session_id, rng, started)
        done_steering.set()
        worker.join(timeout=30)
        assert outcome == ["workflow_complete"], outcome
        totals.update(check_round(race_harness, done))
    print(f"seed={seed} rounds={rounds} " + " ".join(f"{k}={v}" for k, v in sorted(totals.items())))
    # the race happened both ways: some changes won, some came too late
    assert totals["retracted"] and totals["retracts_refused"] and totals["delivered"] and totals["edits"]
