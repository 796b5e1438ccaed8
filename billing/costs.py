"""What runs and steps cost, as people and clients see it, with an explicit unknown price.

A model call whose model has no price costs nothing known: it is counted, never added as zero.
A total of priced and unpriced calls is a lower bound; a total of unpriced calls only is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

from billing.models import MICROS_PER_CREDIT
from billing.pricing import credits_text

if TYPE_CHECKING:
    from sessions.models import Run, Step

# Keys of a run's stored tree usage (sessions.run_end) that hold its tree's cost.
TREE_COST_KEYS = ("cost_micros", "model_calls", "unpriced_model_calls")


@dataclass(frozen=True)
class Cost:
    """Micro-credits of the priced model calls, and how many calls were priced and unpriced."""

    micros: int = 0
    priced_calls: int = 0
    unpriced_calls: int = 0

    @property
    def is_known(self) -> bool:
        """False when every call had an unknown price (a total of none is a known zero)."""
        return self.priced_calls > 0 or self.unpriced_calls == 0

    @property
    def text(self) -> str | None:
        """The API's decimal string ("0.004200"), None when the price is unknown."""
        return credits_text(self.micros) if self.is_known else None

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            micros=self.micros + other.micros,
            priced_calls=self.priced_calls + other.priced_calls,
            unpriced_calls=self.unpriced_calls + other.unpriced_calls,
        )


def calls_cost(*, micros: int, model_calls: int, unpriced_model_calls: int) -> Cost:
    return Cost(
        micros=micros, priced_calls=model_calls - unpriced_model_calls, unpriced_calls=unpriced_model_calls
    )


def run_cost(run: Run) -> Cost:
    """The run's own model calls (not its children's)."""
    return calls_cost(
        micros=run.cost_micros, model_calls=run.model_calls, unpriced_model_calls=run.unpriced_model_calls
    )


def run_tree_cost(run: Run) -> Cost | None:
    """The run's cost with its executors' and sub-agents', as stored when it finished; None for a
    run without children (or one still running)."""
    tree: dict[str, Any] = run.tree_usage or {}
    if not all(key in tree for key in TREE_COST_KEYS):
        return None
    return calls_cost(
        micros=int(tree["cost_micros"]),
        model_calls=int(tree["model_calls"]),
        unpriced_model_calls=int(tree["unpriced_model_calls"]),
    )


def run_total_cost(run: Run) -> Cost:
    """What the run's answer cost: its tree's when it has children, else its own."""
    return run_tree_cost(run) or run_cost(run)


def step_cost(step: Step) -> Cost | None:
    """A model call's cost (unknown when its price was); None for a step that is no model call."""
    if step.kind != "model_call":
        return None
    if step.cost_micros is None:
        return Cost(unpriced_calls=1)
    return Cost(micros=step.cost_micros, priced_calls=1)


def money_text(micros: int) -> str:
    """Credits as a dollar amount: four places below one ("$0.0042"), two from one up ("$12.50")."""
    amount = Decimal(micros) / MICROS_PER_CREDIT
    if 0 < amount < Decimal("0.00005"):
        return "< $0.0001"
    rounded = amount.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
    if rounded >= 1:
        rounded = amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    return f"${rounded:,}"


def cost_label(cost: Cost) -> str:
    """ "$0.0042", "≥ $0.0042 (2 calls without a price)" or "price unknown"."""
    if not cost.is_known:
        return "price unknown"
    amount = money_text(cost.micros)
    if cost.unpriced_calls:
        plural = "" if cost.unpriced_calls == 1 else "s"
        return f"≥ {amount} ({cost.unpriced_calls} call{plural} without a price)"
    return amount
