"""The model request's last check (docs/durability.md, daemon/agent/sendguard.py), with the real
`anthropic` SDK against the fake model: a thread frozen between `ModelCalls.once`'s guard and
the send, while another attempt claims the session, sends nothing when it thaws."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from daemon.agent.model import AnthropicModel, ModelReply, ModelRequest
from daemon.agent.modelcall import CallSettings, ModelCalls
from daemon.agent.sendguard import ATTEMPT_HEADER
from daemon.agent.waiting import Pause
from daemon.bus.session.fencing import Fence, Fenced
from daemon.bus.session.registry import SessionRegistry
from daemon.bus.session.steerbus import SessionChannel, SteerBus
from daemon.fakemodel import FakeModelServer, reply, text
from daemon.host.clock import SystemClock
from daemon.turn.interrupt import TurnInterrupt
from daemon.turn.messages import Message, TextBlock
from tests.test_fencing import Ticks, staged
from tests.tiers import fixture_tier

pytestmark = pytest.mark.unit


@pytest.fixture
@fixture_tier("redis")
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer(rule=lambda request: reply(text("ok"))) as fake:
        yield fake


class FrozenBeforeSend(AnthropicModel):
    """The real model, with `freeze()` run after the guard and before the SDK sends."""

    def __init__(self, url: str, freeze: Any) -> None:
        super().__init__("claude-test", api_key="test-key", base_url=url)
        self.freeze = freeze

    def complete(self, request: ModelRequest, interrupt: TurnInterrupt | None = None) -> ModelReply:
        self.freeze()
        return super().complete(request, interrupt)


REQUEST = ModelRequest("system", [], (Message(role="user", content=(TextBlock(text="hi"),)),))


class NoEvents:
    def emit(self, *events: Any) -> None:
        pass


def calls_for(model: AnthropicModel, channel: SessionChannel) -> ModelCalls:
    clock = SystemClock()
    return ModelCalls(
        model, channel.session_id, Pause(channel, clock, lambda: False), NoEvents(), clock, CallSettings()
    )


@pytest.mark.parametrize("abandonable", [False, True])
def test_a_request_frozen_past_its_lease_is_not_sent(
    bus: SteerBus, registry: SessionRegistry, server: FakeModelServer, abandonable: bool
) -> None:
    sid, stale, _ = staged(bus, registry, finished=False)
    # the stale channel acts as if it were still current until its guard asks Redis
    clock = Ticks()
    stale.fence = Fence(sid, stale.attempt, lease_seconds=3, clock=clock)

    def freeze() -> None:  # SIGSTOP for 10 s: the lease lapses, another attempt took over
        clock.now += 10

    model = FrozenBeforeSend(server.url, freeze)
    calls = calls_for(model, stale)
    with pytest.raises(Fenced):
        calls.once(REQUEST, TurnInterrupt(sid) if abandonable else None)
    assert server.requests == []  # the request never left


def test_a_current_attempts_request_goes_and_names_its_attempt(
    bus: SteerBus, registry: SessionRegistry, server: FakeModelServer
) -> None:
    sid, _, current = staged(bus, registry, finished=False)
    clock = Ticks()
    current.fence = Fence(sid, current.attempt, lease_seconds=3, clock=clock)
    sent: list[str] = []

    def freeze() -> None:  # frozen too, but nobody took the session: Redis confirms the lease
        clock.now += 10

    model = FrozenBeforeSend(server.url, freeze)
    calls = calls_for(model, current)
    calls.before_send = lambda: sent.append("receipt step")
    assert isinstance(calls.once(REQUEST), ModelReply)
    assert [r["_headers"][ATTEMPT_HEADER] for r in server.requests] == [f"{sid}/{current.attempt}"]
    assert sent == ["receipt step"]
