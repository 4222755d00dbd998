"""`spawn_agent` (README's Sub-agents and questions): hand work to child sessions on the fleet and wait
for them.

One child (`{workflowId, goal, context?, branchStrategy?}`) or several (`{agents: [...]}`, at
most 10). The session layer (daemon/session/subagents.py) dispatches them like any session,
idempotently on this call's tool_use id, and waits — steerable, interruptible, cancellable —
until every child has ended; the result lists each child in the order given.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from daemon.tools.base import Tool, ToolContext, ToolError, ToolOutput
from daemon.tools.coordination import MAX_CHILDREN_PER_CALL, AgentSpec
from daemon.workflows.agentconfig import AgentConfig

DESCRIPTION = (
    "Start child agents (sessions of their own, run by any worker of the fleet) and wait until "
    "all of them have finished: give workflowId and goal for one, or agents: [...] for up to 10 "
    "in parallel. The result lists each child's status, outcome, notes, artifacts and issues."
)


class SpawnInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workflowId: str | None = Field(default=None, max_length=200, description="One child: its workflow.")
    goal: str | None = Field(default=None, max_length=32768, description="One child: what it is to do.")
    context: dict[str, Any] | None = Field(default=None, description="One child: facts for its workflow.")
    branchStrategy: Literal["none", "read-only", "worktree"] | None = None
    agentConfig: AgentConfig | None = Field(
        default=None, description="One child: {model, maxOutputTokens, thinkingBudgetTokens}, each optional."
    )
    agents: list[AgentSpec] | None = Field(
        default=None,
        min_length=1,
        description=f"Several children (at most {MAX_CHILDREN_PER_CALL}), in parallel.",
    )

    @model_validator(mode="after")
    def _one_form(self) -> SpawnInput:
        single = self.workflowId is not None or self.goal is not None
        if single == (self.agents is not None):
            raise ValueError("give either workflowId and goal (one child) or agents (several), not both")
        if single and not (self.workflowId and self.goal):
            raise ValueError("one child needs both workflowId and goal")
        return self

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The schema with `AgentSpec` written out in place: no `$ref` for the API to follow."""
        schema = super().model_json_schema(*args, **kwargs)
        defs = schema.pop("$defs", {})

        def inline(node: Any) -> Any:
            if isinstance(node, dict):
                if "$ref" in node:
                    return inline(defs[node["$ref"].rsplit("/", 1)[1]])
                return {key: inline(value) for key, value in node.items()}
            if isinstance(node, list):
                return [inline(item) for item in node]
            return node

        return dict(inline(schema))

    def specs(self) -> list[AgentSpec]:
        if self.agents is not None:
            return self.agents
        assert self.workflowId is not None and self.goal is not None
        return [AgentSpec(workflowId=self.workflowId, goal=self.goal, context=self.context,
                          branchStrategy=self.branchStrategy, agentConfig=self.agentConfig)]  # fmt: skip


def spawn_agent(args: SpawnInput, ctx: ToolContext) -> ToolOutput:
    if ctx.coordinator is None:
        raise ToolError("spawn_agent is not available in this session.")
    specs = args.specs()
    if len(specs) > MAX_CHILDREN_PER_CALL:
        raise ToolError(
            f"At most {MAX_CHILDREN_PER_CALL} children per call; this call asked for {len(specs)}."
        )
    outcome = ctx.coordinator.spawn(ctx.turn_id, ctx.tool_use_id, specs, ctx.interrupt)
    return ToolOutput(outcome.text, is_error=outcome.is_error, released=outcome.released)


SPAWN_AGENT = Tool("spawn_agent", DESCRIPTION, SpawnInput, spawn_agent)
