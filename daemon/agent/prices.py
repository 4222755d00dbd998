"""What a session's model calls cost (docs/DEVELOPING.md, README's Webhooks): usage times a price table.

The table is one documented file, daemon/agent/prices.json (USD per million tokens for
input, output, cache write and cache read, per model); `WORKTRAIN_PRICES_FILE` replaces it
with a file of the same shape (a negotiated rate, a new model). A model the table does not
know costs None — shown as unknown, never guessed. Model names are matched after removing
what providers add to them: a date suffix (`claude-sonnet-4-5-20250929`), Bedrock's region
and vendor prefix and version (`us.anthropic.claude-sonnet-4-5-20250929-v1:0`), Vertex's
`@date` (`claude-sonnet-4-5@20250929`).
"""

from __future__ import annotations

import json
import os
import re
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # the web tier reads the table at dispatch: it need not import the model client
    from daemon.agent.model import Usage

DEFAULT_PRICES = Path(__file__).with_name("prices.json")
PRICES_FILE_ENV = "WORKTRAIN_PRICES_FILE"
PER_TOKENS = 1_000_000
_BEDROCK_PREFIX = re.compile(r"^(?:[a-z]{2,6}\.)?anthropic\.")
_SUFFIXES = (re.compile(r"-v\d+(?::\d+)?$"), re.compile(r"@\d{8}$"), re.compile(r"-\d{8}$"))


class ModelPrice(BaseModel):
    """USD per million tokens."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cacheWrite: float = Field(ge=0)
    cacheRead: float = Field(ge=0)


class PriceTable(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    models: dict[str, ModelPrice]

    def price(self, model: str | None) -> ModelPrice | None:
        if not model:
            return None
        return self.models.get(model) or self.models.get(base_model(model))

    def cost_usd(self, model: str | None, usage: Usage) -> float | None:
        """The cost of `usage` on `model` in USD; None when the table does not know the model."""
        price = self.price(model)
        if price is None:
            return None
        total = (
            usage.input_tokens * price.input
            + usage.output_tokens * price.output
            + usage.cache_write_tokens * price.cacheWrite
            + usage.cache_read_tokens * price.cacheRead
        )
        return total / PER_TOKENS


def base_model(model: str) -> str:
    """The table's name for a provider's model id."""
    name = _BEDROCK_PREFIX.sub("", model.rsplit("/", 1)[-1])
    for suffix in _SUFFIXES:
        name = suffix.sub("", name)
    return name


@cache
def _load(path: str) -> PriceTable:
    return PriceTable.model_validate(json.loads(Path(path).read_text()))


def price_table() -> PriceTable:
    """The table in force: WORKTRAIN_PRICES_FILE's, or the bundled one (each read once)."""
    return _load(os.environ.get(PRICES_FILE_ENV) or str(DEFAULT_PRICES))


def cost_usd(model: str | None, usage: Usage) -> float | None:
    return price_table().cost_usd(model, usage)


def unknown_model(model: str | None) -> str | None:
    """Why a dispatch naming `model` gets a warning (README's Models, thinking and cost): a
    model the price table does not know runs (the API decides whether it exists) but its cost
    stays unknown; a typo (`gpt-4o` for a Claude model) says so at once. None: known, or none
    named (the worker's default)."""
    if not model or price_table().price(model) is not None:
        return None
    return (
        f"model {model[:200]!r} is not in the price table ({PRICES_FILE_ENV} or daemon/agent/prices.json): "
        "the session runs, but its cost stays unknown — is the name right?"
    )
