"""Announcing stored events on the channel layer from synchronous code.

The events stored by one statement travel as one message (``{"type": "session.events",
"events": [...]}`` on the session's group, what ``sessions.streams`` listens for): a burst such
as a claim's ``run.status``, ``run.started`` and ``run.status`` costs one send.

Event writers are synchronous and the channel layer is async-only (``async_to_sync`` would
start an event loop, and with channels-redis a connection, per call), so one background event
loop per process sends every announcement with the layer's ``group_send``, in the order they
were published. The events are stored before they are announced: a layer that fails (Redis
down) never fails nor holds up their writer. The publisher then skips announcements for
``PAUSE_AFTER_FAILURE_SECONDS`` and subscribers read the store (``sessions.streams`` polls it).
"""

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

# A send that takes longer gives up: the announcements behind it must not wait on a Redis that
# accepts connections but does not answer.
SEND_TIMEOUT_SECONDS = 2.0
PAUSE_AFTER_FAILURE_SECONDS = 5.0

Announcement = tuple[str, list[dict[str, Any]]]
# None is the stop marker.
AnnouncementQueue = asyncio.Queue[Announcement | None]


class _Publisher:
    """The process's background event loop thread and what it has sent, for ``wait_until_sent``."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: AnnouncementQueue | None = None
        self._thread: threading.Thread | None = None
        # Announcements handed to the loop, and those it has sent (or skipped, or given up on).
        self._sent_changed = threading.Condition()
        self._handed_over = 0
        self._sent = 0
        # Written by the loop's thread only; read by emitters to skip announcements cheaply.
        self._paused_until = 0.0
        self._is_failing = False

    def publish(self, group: str, envelopes: list[dict[str, Any]]) -> None:
        if self._is_paused():
            return
        loop, queue = self._ensure_started()
        with self._sent_changed:
            self._handed_over += 1
        loop.call_soon_threadsafe(queue.put_nowait, (group, envelopes))

    def wait_until_sent(self, timeout: float) -> bool:
        """Block until what was published so far has been sent; False if ``timeout`` came first."""
        with self._sent_changed:
            handed_over = self._handed_over
            return self._sent_changed.wait_for(lambda: self._sent >= handed_over, timeout=timeout)

    def _is_paused(self) -> bool:
        return self._clock() < self._paused_until

    def _ensure_started(self) -> tuple[asyncio.AbstractEventLoop, AnnouncementQueue]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                # A thread that died (or stayed behind in the parent of a fork) took its queue
                # with it: what it held is given up on, so that waiters do not wait for it.
                with self._sent_changed:
                    self._sent = self._handed_over
                    self._sent_changed.notify_all()
                ready = threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(ready,), name="event-publisher", daemon=True
                )
                self._thread.start()
                ready.wait(timeout=5)
            assert self._loop is not None and self._queue is not None
            return self._loop, self._queue

    def _run(self, ready: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        self._queue = asyncio.Queue()
        ready.set()
        try:
            loop.run_until_complete(self._drain(self._queue))
        finally:
            loop.close()

    async def _drain(self, queue: AnnouncementQueue) -> None:
        layer = get_channel_layer()
        while True:
            first = await queue.get()
            waiting = queue.qsize()
            batch, is_stopping = _take_waiting(first, queue)
            # Counted before the sends: more may be queued while they are awaited.
            taken = 1 + waiting - queue.qsize() - (1 if is_stopping else 0)
            if layer is not None:
                for group, envelopes in batch:
                    await self._send(layer, group, envelopes)
            with self._sent_changed:
                self._sent += taken
                self._sent_changed.notify_all()
            if is_stopping:
                return

    async def _send(self, layer: Any, group: str, envelopes: list[dict[str, Any]]) -> None:
        if self._is_paused():
            return  # queued before the failure that started the pause
        try:
            async with asyncio.timeout(SEND_TIMEOUT_SECONDS):
                await layer.group_send(group, {"type": "session.events", "events": envelopes})
        except (RedisError, OSError) as error:  # OSError covers the timeout (TimeoutError)
            self._pause_after(error)
        else:
            if self._is_failing:
                self._is_failing = False
                logger.info("the channel layer answers again; announcing events")

    def _pause_after(self, error: BaseException) -> None:
        """Skip announcements for a while; say so once per outage, not once per announcement."""
        self._paused_until = self._clock() + PAUSE_AFTER_FAILURE_SECONDS
        if not self._is_failing:
            self._is_failing = True
            logger.warning(
                "could not announce events on the channel layer (%s: %s); skipping announcements"
                " for %.0f s at a time until it answers, subscribers read the event store meanwhile",
                type(error).__name__,
                error,
                PAUSE_AFTER_FAILURE_SECONDS,
            )


_publisher = _Publisher()


def _take_waiting(first: Announcement | None, queue: AnnouncementQueue) -> tuple[list[Announcement], bool]:
    """``first`` and everything queued behind it, a group's consecutive announcements merged into
    one message (an event waits for no other event's round trip); True if the stop marker came."""
    batch: list[Announcement] = []
    item = first
    while item is not None:
        group, envelopes = item
        if batch and batch[-1][0] == group:
            batch[-1] = (group, batch[-1][1] + envelopes)
        else:
            batch.append((group, envelopes))
        if queue.empty():
            return batch, False
        item = queue.get_nowait()
    return batch, True


def has_cross_process_layer() -> bool:
    # The in-memory layer cannot reach other processes, and its queues belong to the
    # ASGI server's event loop: the embedded default's subscribers poll the store.
    return not isinstance(get_channel_layer(), InMemoryChannelLayer | type(None))


def wait_until_published(timeout: float = 0.25) -> bool:
    """Block (without the interpreter lock) until this process's announcements so far are sent.

    The publisher's thread needs the interpreter lock for each send; a worker that goes on to
    other Python work right after a run's end would keep it waiting (a thread that wants the
    lock gets it only when the holder blocks, or after the 5 ms switch interval). ``timeout``
    bounds the wait when the channel layer is slow: the events are stored either way.
    """
    return _publisher.wait_until_sent(timeout)


def publish(group: str, envelopes: list[dict[str, Any]]) -> None:
    """Announce events (in seq order) to the group's listeners, as one channel-layer message."""
    if not envelopes or not has_cross_process_layer():
        return
    _publisher.publish(group, envelopes)
