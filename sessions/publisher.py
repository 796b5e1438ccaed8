"""Announcing stored events on the channel layer from synchronous code.

A worker emits many events per second; ``async_to_sync`` would start an event loop
(and, with channels-redis, a connection) per call. One background loop per process
sends them in order instead, without making the emitter wait. The events stored by one
statement travel as one message: a burst such as a claim's ``run.status``, ``run.started``
and ``run.status`` costs one Redis round trip, and its last event is not held up behind
the others'.
"""

import asyncio
import logging
import threading
from typing import Any

from channels.layers import InMemoryChannelLayer, get_channel_layer

logger = logging.getLogger(__name__)


class _Publisher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, list[dict[str, Any]]] | None] | None = None
        self._thread: threading.Thread | None = None
        # Announcements handed to the loop, and those it has sent (or given up on), for
        # ``wait_until_sent``.
        self._sent_changed = threading.Condition()
        self._handed_over = 0
        self._sent = 0

    def _ensure_started(
        self,
    ) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue[tuple[str, list[dict[str, Any]]] | None]]:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
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
        loop.run_until_complete(self._drain(self._queue))

    async def _drain(self, queue: asyncio.Queue[tuple[str, list[dict[str, Any]]] | None]) -> None:
        layer = get_channel_layer()
        while True:
            first = await queue.get()
            waiting = queue.qsize()
            batch, is_stopping = _take_waiting(first, queue)
            # Counted before the sends: more may be queued while they are awaited.
            taken = 1 + waiting - queue.qsize() - (1 if is_stopping else 0)
            if layer is not None:
                for group, envelopes in batch:
                    await _send(layer, group, envelopes)
            with self._sent_changed:
                self._sent += taken
                self._sent_changed.notify_all()
            if is_stopping:
                return

    def publish(self, group: str, envelopes: list[dict[str, Any]]) -> None:
        loop, queue = self._ensure_started()
        with self._sent_changed:
            self._handed_over += 1
        loop.call_soon_threadsafe(queue.put_nowait, (group, envelopes))

    def wait_until_sent(self, timeout: float) -> bool:
        """Block until what was published so far has been sent; False if ``timeout`` came first."""
        with self._sent_changed:
            handed_over = self._handed_over
            return self._sent_changed.wait_for(lambda: self._sent >= handed_over, timeout=timeout)


_publisher = _Publisher()


def _take_waiting(
    first: tuple[str, list[dict[str, Any]]] | None,
    queue: asyncio.Queue[tuple[str, list[dict[str, Any]]] | None],
) -> tuple[list[tuple[str, list[dict[str, Any]]]], bool]:
    """``first`` and everything queued behind it, a group's consecutive announcements merged into
    one message (an event waits for no other event's round trip); True if the stop marker came."""
    batch: list[tuple[str, list[dict[str, Any]]]] = []
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


async def _send(layer: Any, group: str, envelopes: list[dict[str, Any]]) -> None:
    try:
        await layer.group_send(group, {"type": "session.events", "events": envelopes})
    except Exception:
        seqs = [envelope.get("seq") for envelope in envelopes]
        logger.warning("could not announce events %s on %s", seqs, group, exc_info=True)


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
    if envelopes and has_cross_process_layer():
        _publisher.publish(group, envelopes)
