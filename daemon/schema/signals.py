"""A coordinator signal (`signal_coordinator`; README's Sub-agents and questions), as stored and served."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from daemon.host.clock import utc_now_iso

SignalKind = Literal["progress", "finding", "question", "blocked", "result"]


class Signal(BaseModel):
    """One signal as stored and served."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    offset: int = 0  # assigned by signal.lua
    kind: SignalKind
    summary: str = Field(max_length=200)
    data: dict[str, Any] | None = None
    wait: bool = False  # the agent waits for a reply (a steer)
    turnId: int
    ts: str = Field(default_factory=utc_now_iso)
    sessionId: str
