"""A model request sent while the loop stores the start of its step.

Storing a model call's start is a database round trip and a commit; the request to the model
is a network round trip. Neither needs the other's answer, so the request goes out on a kept
thread while the loop's thread stores the step. The step's events are stored before the loop's
thread reads any event of the stream, so the run's events keep their order.

The kept thread only opens the stream and waits for its first event; from then on the loop's
thread reads it, as it would have without the early start.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import cast

from agents.runtime.stop_signal import StopSignal
from agents.runtime.types import ModelClient, ModelRequest, ModelStreamEvent

# While the stream's first event is awaited, the loop's thread polls for a stop this often.
STOP_POLL_SECONDS = 0.25

# A stream holds its thread until its first event (a hosted model's time to first token): the
# pool must not make one call wait for another's. Threads start only when none is idle.
MAX_OPENING_STREAMS = 64

_ENDED = object()  # the stream ended before its first event


class _Openers:
    """The kept threads that open model streams, started by the process that uses them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    def submit(self, read_first_event: Callable[[], object]) -> Future[object]:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    MAX_OPENING_STREAMS, thread_name_prefix="agentry-model-stream"
                )
            return self._executor.submit(read_first_event)

    def forget_after_fork(self) -> None:
        """A forked worker has none of its parent's threads: it starts its own."""
        self._lock = threading.Lock()
        self._executor = None


_openers = _Openers()
os.register_at_fork(after_in_child=_openers.forget_after_fork)


class EarlyStream:
    """``model.stream(request)`` started on a kept thread at construction; ``events()`` reads it
    on the loop's thread. Call ``abandon()`` instead when the loop does not read it."""

    def __init__(self, model: ModelClient, request: ModelRequest, *, stop: StopSignal) -> None:
        self._stop = stop
        self._is_read_by_loop = False
        self._abandoned = threading.Event()
        self._lock = threading.Lock()  # orders abandon() against the first event's arrival
        self._first_event_read = False
        self._events = model.stream(request, should_stop=self._should_stop)
        self._first = _openers.submit(self._read_first_event)

    def _should_stop(self) -> bool:
        if self._is_read_by_loop:
            return self._stop.check() is not None
        # The kept thread may not poll: recorders need not be thread-safe (StopSignal).
        return self._abandoned.is_set() or self._stop.is_set()

    def _read_first_event(self) -> object:
        try:
            return next(self._events)
        except StopIteration:
            return _ENDED
        finally:
            with self._lock:
                self._first_event_read = True
                if self._abandoned.is_set():
                    self._close_events()

    def abandon(self) -> None:
        """The loop will not read the stream: it is closed once its first event came (at once if
        it already did); a stream still waiting for it stops at its next chunk."""
        with self._lock:
            self._abandoned.set()
            if self._first_event_read:
                self._close_events()

    def _close_events(self) -> None:
        """A client's stream is a generator: closing it closes the HTTP response it holds."""
        close = getattr(self._events, "close", None)
        if close is not None:
            close()

    def events(self) -> Iterator[ModelStreamEvent]:
        """The stream's events; raises what the model client raised, on the loop's thread."""
        first = self._await_first_event()
        self._is_read_by_loop = True
        try:
            if first is _ENDED:
                return
            yield cast(ModelStreamEvent, first)
            yield from self._events
        finally:
            self._close_events()

    def _await_first_event(self) -> object:
        while not wait([self._first], timeout=STOP_POLL_SECONDS).done:
            if self._stop.check() is not None:
                self._abandoned.set()  # the client raises StreamCancelled at its next chunk
        return self._first.result()
