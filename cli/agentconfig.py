"""`worktrain dispatch --model --max-output-tokens --thinking-budget` (README's worktrain command): the
dispatch body's `agentConfig`, each field only when given (the workflow's own, then the
fleet's WORKTRAIN_MODEL / _MAX_OUTPUT_TOKENS / _THINKING_BUDGET fill the rest)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

NAMES = {"model": "model", "max_output_tokens": "maxOutputTokens", "thinking_budget": "thinkingBudgetTokens"}


def agent_options(fn: Callable[..., None]) -> Callable[..., None]:
    options = [
        click.option(
            "--model",
            help="The session's model, e.g. claude-haiku-4-5 [default: the workflow's, "
            "then WORKTRAIN_MODEL].",
        ),
        click.option(
            "--max-output-tokens",
            type=click.IntRange(min=1),
            help="max_tokens of each model call [default: WORKTRAIN_MAX_OUTPUT_TOKENS, 8192].",
        ),
        click.option(
            "--thinking-budget",
            type=click.IntRange(min=0),
            help="Extended thinking's budget in tokens (>= 1024, below --max-output-tokens); 0: off.",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def agent_body(options: dict[str, Any]) -> dict[str, Any]:
    """`{"agentConfig": {...}}` with the options given, or nothing."""
    config = {field: options[name] for name, field in NAMES.items() if options.get(name) is not None}
    return {"agentConfig": config} if config else {}
