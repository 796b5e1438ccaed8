"""Model calls paid for in credits: each call holds its worst case first, then pays what it cost.

``MeteredModelClient`` wraps any model client, so every model call of a run (the loop's, a
compaction's, a planner's) goes through the same hold and settlement. The Django side
(``billing.meter``) decides what a hold costs and whether it fits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from agents.runtime.types import (
    ModelClient,
    ModelError,
    ModelRequest,
    ModelResponseCompleted,
    ModelStreamEvent,
    StreamCancelled,
    Usage,
)


class CreditsRefused(Exception):
    """The call's worst case does not fit the credits or a budget; the message says which."""


class ModelUnpriced(CreditsRefused):
    """The model has no price, so its calls cannot be paid from credits or counted in a budget."""


class CreditMeter(Protocol):
    def reserve(self, request: ModelRequest) -> object:
        """Hold the call's worst-case cost and return the hold; raises ``CreditsRefused`` (or
        ``ModelUnpriced`` for a model without a price)."""
        ...

    def settle(self, hold: object, usage: Usage) -> None:
        """Pay what the call cost (``usage``) and release the rest of the hold."""
        ...


class MeteredModelClient:
    """A model client whose calls are held and settled by a ``CreditMeter``.

    A refused hold raises ``ModelError`` of kind ``insufficient_credits`` (``no_price`` for a
    model without a price) before the inner client is called. A call that fails or is cancelled
    settles what it reported spending.
    """

    def __init__(self, inner: ModelClient, meter: CreditMeter) -> None:
        self.inner = inner
        self.meter = meter

    def __getattr__(self, name: str) -> object:
        # Optional capabilities of the inner client (token counting) stay visible.
        return getattr(self.inner, name)

    def stream(self, request: ModelRequest, *, should_stop: Callable[[], bool]) -> Iterator[ModelStreamEvent]:
        try:
            hold = self.meter.reserve(request)
        except ModelUnpriced as unpriced:
            raise ModelError(str(unpriced), kind="no_price", is_retryable=False) from unpriced
        except CreditsRefused as refused:
            raise ModelError(str(refused), kind="insufficient_credits", is_retryable=False) from refused
        spent = Usage()
        try:
            for event in self.inner.stream(request, should_stop=should_stop):
                if isinstance(event, ModelResponseCompleted):
                    spent = event.usage
                yield event
        except StreamCancelled as cancelled:
            spent = cancelled.usage
            raise
        finally:
            self.meter.settle(hold, spent)
