"""The loop's view of a stop request (cancel, run timeout, lost lease)."""

from __future__ import annotations

import threading

from agents.runtime.types import RunRecorder, StopRequestReason


class StopSignal:
    """Polls ``RunRecorder.stop_requested`` on the loop's thread and shares the answer.

    Tool threads read only the cached flag (``is_set``): recorder implementations may not be
    thread-safe, and a Django-backed one would open a database connection per thread.
    Once a stop is requested it stays requested, whatever later polls return.
    """

    def __init__(self, recorder: RunRecorder) -> None:
        self._recorder = recorder
        self._reason: StopRequestReason | None = None
        self._is_requested = threading.Event()

    @property
    def reason(self) -> StopRequestReason | None:
        return self._reason

    def check(self) -> StopRequestReason | None:
        """Poll the recorder. Call from the loop's thread only."""
        if self._reason is None:
            self._reason = self._recorder.stop_requested()
            if self._reason is not None:
                self._is_requested.set()
        return self._reason

    def is_set(self) -> bool:
        """Whether a stop was seen by ``check``; safe from any thread."""
        return self._is_requested.is_set()
