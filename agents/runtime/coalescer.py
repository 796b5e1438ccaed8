"""Coalescing of streamed text so a fast model cannot flood the event store."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

DeltaEventType = Literal["text.delta", "reasoning.delta"]


class DeltaCoalescer:
    """Buffers deltas so each kind is emitted at most once per ``flush_seconds``, counting from
    the coalescer's creation (the model request).

    A hosted model's first token comes long after one interval, so it goes out at once (time
    to first token stays low); a model that answers within the first interval has its text
    stored once, with the message's end, instead of a write for its first delta. Switching
    kind flushes the other buffer first, so events keep the order of the stream, and the
    texts of the emitted events concatenate to exactly the streamed text once ``flush`` ran.
    Buffered text waits for the next delta or ``flush``: nothing is emitted from a timer
    thread, because recorders may not be thread-safe.
    """

    def __init__(
        self,
        emit: Callable[[str, dict[str, Any]], None],
        *,
        flush_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self._flush_seconds = flush_seconds
        self._clock = clock
        self._buffered_type: DeltaEventType | None = None
        self._buffer: list[str] = []
        self._window_start = clock()
        self._last_emitted_at: dict[DeltaEventType, float] = {}

    def add(self, event_type: DeltaEventType, text: str) -> None:
        if not text:
            return
        if self._buffered_type is not None and self._buffered_type != event_type:
            self.flush()
        self._buffered_type = event_type
        self._buffer.append(text)
        last_emitted_at = self._last_emitted_at.get(event_type, self._window_start)
        if self._clock() - last_emitted_at >= self._flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self._buffered_type is None:
            return
        self._emit(self._buffered_type, {"text": "".join(self._buffer)})
        self._last_emitted_at[self._buffered_type] = self._clock()
        self._buffered_type = None
        self._buffer = []
