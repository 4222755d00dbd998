"""What `signal_coordinator` and `spawn_agent` need from the session around them (README's Sub-agents
and questions).

The tools validate their input and say what they want; the session layer does it
(daemon/session/coordinator.py implements `Coordinator`: the fenced signal write, the
dispatch of children, the wait for them that keeps the session steerable, interruptible
and cancellable). This module is the interface between the two, so the tools never import
the layers above them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from daemon.turn.interrupt import TurnInterrupt
from daemon.workflows.agentconfig import AgentConfig

MAX_CHILDREN_PER_CALL = 10


class AgentSpec(BaseModel):
    """One child to start."""

    model_config = ConfigDict(extra="forbid")

    workflowId: str = Field(min_length=1, max_length=200, description="The workflow the child runs.")
    goal: str = Field(min_length=1, max_length=32768, description="What the child is to do.")
    context: dict[str, Any] | None = Field(default=None, description="Facts for the child's workflow.")
    branchStrategy: Literal["none", "read-only", "worktree"] | None = Field(
        default=None, description="Where the child works; by default in this session's workspace as it is."
    )
    agentConfig: AgentConfig | None = Field(
        default=None,
        description="The child's model, output budget and thinking budget "
        "(unset: its workflow's, then the fleet's default): a cheap model to explore, a strong one to fix.",
    )


@dataclass(frozen=True)
class SpawnOutcome:
    text: str
    is_error: bool = False
    released: bool = False  # the worker is stopping: the turn is abandoned, resumed elsewhere


class Coordinator(Protocol):
    def signal(self, turn_id: int, kind: str, summary: str, data: dict[str, Any] | None, wait: bool) -> int:
        """Append the signal (fenced); returns its offset."""
        ...

    def spawn(
        self, turn_id: int, tool_use_id: str, agents: list[AgentSpec], interrupt: TurnInterrupt | None
    ) -> SpawnOutcome:
        """Start the children (idempotent on the tool_use id) and wait for every one to end."""
        ...
