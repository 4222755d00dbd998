"""Which model a session runs and how much it may write and think (docs/DEVELOPING.md).

`agentConfig` is WorkRail's name for it: a workflow file may carry one (its default), a
dispatch and a `spawn_agent` call may carry one (the session's own). Each field left unset
falls back to the next layer: dispatch → workflow → the environment (`WORKTRAIN_MODEL`,
`WORKTRAIN_MAX_OUTPUT_TOKENS`, `WORKTRAIN_THINKING_BUDGET`). The resolved config is stored on
the session's record at dispatch, so every attempt on any worker calls the same model.

Pure: the checks a dispatch answers 400 with live here (`problem`), so the web, the CLI,
MCP and spawn_agent give the same reason.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

# The Messages API refuses a thinking budget below this (extended thinking's minimum)
MIN_THINKING_BUDGET = 1024
MAX_OUTPUT_TOKENS_LIMIT = 128_000  # the largest output any current Claude model allows
MODEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:@/-]*$"  # Anthropic, Bedrock (ARNs, profiles) and Vertex ids


class AgentConfig(BaseModel):
    """`{model, maxOutputTokens, thinkingBudgetTokens}`; None: the next layer's value.

    `thinkingBudgetTokens` 0 turns extended thinking off; otherwise the request carries
    `thinking: {type: "enabled", budget_tokens}` and `max_tokens` must stay above it."""

    # extra="ignore": WorkRail's workflows carry other fields here (modelTier) WorkTrain does
    # not run; a dispatch body checks its own keys (web/models.py forbids unknown ones)
    model_config = ConfigDict(frozen=True, extra="ignore")

    model: str | None = Field(default=None, min_length=1, max_length=200, pattern=MODEL_NAME)
    maxOutputTokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS_LIMIT)
    thinkingBudgetTokens: int | None = Field(default=None, ge=0, le=MAX_OUTPUT_TOKENS_LIMIT)

    def over(self, base: AgentConfig | None) -> AgentConfig:
        """This config's fields, the unset ones taken from `base`."""
        if base is None:
            return self
        mine = self.model_dump(exclude_none=True)
        return AgentConfig.model_validate({**base.model_dump(exclude_none=True), **mine})

    @property
    def empty(self) -> bool:
        return self.model is None and self.maxOutputTokens is None and self.thinkingBudgetTokens is None


def problem(config: AgentConfig) -> str | None:
    """Why the API would refuse a request made with `config` (resolved), or None."""
    budget = config.thinkingBudgetTokens or 0
    if budget == 0:
        return None
    if budget < MIN_THINKING_BUDGET:
        least = MIN_THINKING_BUDGET
        return f"thinkingBudgetTokens must be 0 (no extended thinking) or at least {least}, not {budget}"
    limit = config.maxOutputTokens
    if limit is not None and budget >= limit:
        return (
            f"thinkingBudgetTokens ({budget}) must be below maxOutputTokens ({limit}): "
            "the thinking is part of the output budget"
        )
    return None
