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
            batch, is_stopping = _take_waiting(await queue.get(), queue)
            if layer is not None:
                for group, envelopes in batch:
                    await _send(layer, group, envelopes)
            if is_stopping:
                return

    def publish(self, group: str, envelopes: list[dict[str, Any]]) -> None:
        loop, queue = self._ensure_started()
        loop.call_soon_threadsafe(queue.put_nowait, (group, envelopes))


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


def publish(group: str, envelopes: list[dict[str, Any]]) -> None:
    """Announce events (in seq order) to the group's listeners, as one channel-layer message."""
    if envelopes and has_cross_process_layer():
        _publisher.publish(group, envelopes)
