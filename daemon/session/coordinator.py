"""The session side of `signal_coordinator` and `spawn_agent` (daemon/tools/coordination.py).

Built by the runner for each attempt, handed to the tools through the agent's state: the
signal goes through the attempt's fenced channel (daemon/bus/session/signals.py; the tool emits
`coordinator_signal`); a spawn is daemon/session/subagents.py's.
"""

from __future__ import annotations

from typing import Any

from daemon.bus.session.signals import SignalStream
from daemon.bus.session.steerbus import SessionChannel
from daemon.schema.signals import Signal, SignalKind
from daemon.session.subagents import Subagents
from daemon.tools.coordination import AgentSpec, SpawnOutcome
from daemon.turn.interrupt import TurnInterrupt


class SessionCoordinator:
    def __init__(self, channel: SessionChannel, signals: SignalStream, subagents: Subagents | None) -> None:
        self.channel = channel
        self.signals = signals
        self.subagents = subagents

    def signal(self, turn_id: int, kind: str, summary: str, data: dict[str, Any] | None, wait: bool) -> int:
        session_id = self.channel.session_id
        signal_kind: SignalKind = kind  # type: ignore[assignment]  # validated by the tool's input
        signal = Signal(
            kind=signal_kind, summary=summary, data=data, wait=wait, turnId=turn_id, sessionId=session_id
        )
        return int(self.signals.append(self.channel, signal).offset)  # the tool emits coordinator_signal

    def spawn(
        self, turn_id: int, tool_use_id: str, agents: list[AgentSpec], interrupt: TurnInterrupt | None
    ) -> SpawnOutcome:
        if self.subagents is None:
            return SpawnOutcome("spawn_agent is not available on this worker.", is_error=True)
        return self.subagents.spawn(turn_id, tool_use_id, agents, interrupt)
