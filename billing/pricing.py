"""What a model call costs, from the price table."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from agents.models import ModelProvider
from agents.runtime.types import Usage
from sessions.statements.run_reads import model_price

if TYPE_CHECKING:
    from sessions.models import Run


@dataclass(frozen=True)
class Price:
    """Credits per million tokens, which is also micro-credits per token."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    @property
    def is_free(self) -> bool:
        return not (self.input or self.output or self.cache_read or self.cache_write)


# The offline demo model runs in the process and calls no provider: it costs nothing, whatever
# its name and whatever the price table says.
FREE = Price(input=Decimal(0), output=Decimal(0), cache_read=Decimal(0), cache_write=Decimal(0))


def price_for(*, provider: str, model: str) -> Price | None:
    """The model's price, or None when it is unknown."""
    if provider == ModelProvider.OFFLINE:
        return FREE
    row = model_price(provider=provider, model=model)
    if row is None:
        return None
    return Price(
        input=row.input_per_million,
        output=row.output_per_million,
        cache_read=row.cache_read_per_million,
        cache_write=row.cache_write_per_million,
    )


def run_price(run: Run) -> Price | None:
    """The price of the model a run's agent snapshot names."""
    config = run.agent_config
    return price_for(provider=config.get("model_provider", ""), model=config.get("model_name", ""))


def cost_micros(price: Price, usage: Usage) -> int:
    """The call's cost in micro-credits, rounded up to a whole one."""
    exact = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_read_tokens * price.cache_read
        + usage.cache_write_tokens * price.cache_write
    )
    return math.ceil(exact)


def worst_case_micros(price: Price, *, input_tokens: int, max_output_tokens: int) -> int:
    """The most a call can cost: every input token at the dearer of input and cache write, and
    the whole output allowance."""
    return math.ceil(input_tokens * max(price.input, price.cache_write) + max_output_tokens * price.output)


def credits_text(micros: int) -> str:
    """Micro-credits as a decimal string with six places ("12.500000")."""
    sign = "-" if micros < 0 else ""
    whole, fraction = divmod(abs(micros), 1_000_000)
    return f"{sign}{whole}.{fraction:06d}"
