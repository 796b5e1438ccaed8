"""Announcing stored events on the channel layer from synchronous code.

The events stored by one statement travel as one message: a burst such as a claim's
``run.status``, ``run.started`` and ``run.status`` costs one Redis round trip, and its last
event is not held up behind the others'.

On channels-redis's pub/sub layer (what Agentry configures with ``REDIS_URL``) the emitting
thread publishes itself, with a synchronous Redis client, in the layer's wire format
(``DirectPublisher``): one ``PUBLISH`` is about 0.05 ms of CPU and 0.08 ms in all, where handing
it to a background event loop cost 0.24 ms of CPU, and the loop's thread then waited for the
interpreter lock behind the emitter's next work (up to 2 ms on a busy worker). The emitter
does not wait for Redis's reply either (``PublishConnection``). Any other
cross-process layer is async-only: one background loop per process sends to it in order
(``async_to_sync`` would start an event loop, and a connection, per call).
"""

import asyncio
import atexit
import contextlib
import logging
import threading
import time
from functools import cache
from typing import Any

import redis
from channels.layers import InMemoryChannelLayer, get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from core.redis_replies import RepliesReadLater

logger = logging.getLogger(__name__)

# An unreachable Redis costs an emitter at most this long, once per PAUSE_AFTER_FAILURE_SECONDS:
# meanwhile announcements are skipped and subscribers read the store (sessions.streams polls it).
REDIS_TIMEOUT_SECONDS = 0.5
PAUSE_AFTER_FAILURE_SECONDS = 5.0
# Replies are read once they have arrived, never waited for; this many unread means Redis is not
# answering, and the next publish waits for one (at most REDIS_TIMEOUT_SECONDS).
MAX_UNREAD_REPLIES = 1000


class PublishConnection(RepliesReadLater):
    """One Redis connection whose ``PUBLISH`` commands go out without waiting for their replies
    (thread-safe; a forked child opens its own).

    A reply is only the number of subscribers reached, which no emitter uses. Waiting for it cost
    a round trip per announcement, and on a busy machine Redis answers only once it gets a CPU:
    0.3 to 0.5 ms at each of a run's announcements, on the way to its next step. The replies that
    have arrived are read before each send, so they never pile up; Redis runs the commands in
    the order they were written, so announcements keep their order.
    """

    def __init__(self, url: str) -> None:
        super().__init__(
            redis.ConnectionPool.from_url(
                url, socket_timeout=REDIS_TIMEOUT_SECONDS, socket_connect_timeout=REDIS_TIMEOUT_SECONDS
            )
        )
        self._lock = threading.Lock()
        atexit.register(self.read_replies)

    def publish(self, channel: str, message: bytes) -> None:
        with self._lock:
            if self.is_open_in_this_process():
                if self.unread_replies >= MAX_UNREAD_REPLIES:
                    self.read(1)
                self.read_arrived()
            self.send([("PUBLISH", channel, message)])

    def read_replies(self) -> None:
        """Wait for every outstanding reply: before a process exits, so that closing the socket
        with replies unread (which resets the connection) cannot cost Redis the last commands."""
        with self._lock:
            if self.is_open_in_this_process():
                with contextlib.suppress(redis.RedisError, OSError):
                    self.read(self.unread_replies)


class DirectPublisher:
    """Publishes on a channels-redis pub/sub layer from the calling thread (thread-safe)."""

    def __init__(self, layer: RedisPubSubChannelLayer, client: PublishConnection, *, prefix: str) -> None:
        self._layer = layer
        self._client = client
        self._prefix = prefix
        self._paused_until = 0.0

    def group_channel(self, group: str) -> str:
        """The Redis channel of a group, as channels-redis names it (``_get_group_channel_name``)."""
        return f"{self._prefix}__group__{group}"

    def publish(self, group: str, envelopes: list[dict[str, Any]]) -> None:
        if time.monotonic() < self._paused_until:
            return
        try:
            message = self._layer.serialize({"type": "session.events", "events": envelopes})
            self._client.publish(self.group_channel(group), message)
        except Exception:  # the events are stored: an announcement must never fail their writer
            self._paused_until = time.monotonic() + PAUSE_AFTER_FAILURE_SECONDS
            seqs = [envelope.get("seq") for envelope in envelopes]
            logger.warning(
                "could not announce events %s on %s; pausing announcements for %.0f s",
                seqs,
                group,
                PAUSE_AFTER_FAILURE_SECONDS,
                exc_info=True,
            )


@cache
def direct_publisher() -> DirectPublisher | None:
    """The direct publisher when the layer is channels-redis pub/sub on one Redis URL, else None."""
    layer = get_channel_layer()
    layers: Any = settings.CHANNEL_LAYERS
    config: dict[str, Any] = layers.get("default", {}).get("CONFIG", {})
    hosts = config.get("hosts", [])
    if not isinstance(layer, RedisPubSubChannelLayer) or len(hosts) != 1 or not isinstance(hosts[0], str):
        return None
    return DirectPublisher(layer, PublishConnection(hosts[0]), prefix=config.get("prefix", "asgi"))


@receiver(setting_changed)
def _forget_direct_publisher(*, setting: str, **kwargs: Any) -> None:
    if setting == "CHANNEL_LAYERS":  # channels forgets its layers then too
        direct_publisher.cache_clear()


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
    """Block (without the interpreter lock) until this process's announcements so far are sent
    (only the background loop's; a direct publisher's are sent when ``publish`` returns).

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
    direct = direct_publisher()
    if direct is not None:
        direct.publish(group, envelopes)
    else:
        _publisher.publish(group, envelopes)
