"""Live event streams shared by the websocket consumer and the SSE views.

One hub per event loop (that is, per ASGI process) watches every session that has
local subscribers: it listens on the channel layer when there is a cross-process one
and polls the store as well (``STREAM_POLL_SECONDS``: every 50 ms in the embedded default,
every second as a safety net with Redis), then hands each event to the session's
subscribers. With a layer, the poll reads a session's events only when the layer has not
brought them by the next poll: under load an announcement often arrives a little after the
poll sees its seq, and reading it then would only repeat the delivery. Each subscriber
remembers the last seq it delivered, drops repeats and fills any gap from the store, so a
client sees every event once and in order, whichever path it came by.
"""

import asyncio
import contextlib
import contextvars
import json
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from channels.db import database_sync_to_async
from channels.layers import BaseChannelLayer, get_channel_layer
from django.conf import settings
from django.db import DatabaseError

from sessions import event_store
from sessions.event_store import PAGE_SIZE, Envelope
from sessions.events import session_group_name
from sessions.publisher import has_cross_process_layer
from sessions.state import TERMINAL_EVENT_TYPES
from tenants.actors import Actor, actor_for_api_key
from tenants.authentication import api_key_check

logger = logging.getLogger(__name__)

TERMINAL_RUN_EVENT_TYPES = frozenset(TERMINAL_EVENT_TYPES.values())
# A subscriber further behind than this stops queueing live events and re-reads the
# store once it catches up: a slow client costs a database read, not unbounded memory.
INBOX_LIMIT = 1000
LAYER_RETRY_SECONDS = 1.0

fetch_events_after = database_sync_to_async(event_store.events_after)
fetch_run_events_after = database_sync_to_async(event_store.run_events_after)
fetch_latest_event_seqs = database_sync_to_async(event_store.latest_event_seqs)
fetch_latest_event_seq = database_sync_to_async(event_store.latest_event_seq)
fetch_run_is_finished = database_sync_to_async(event_store.run_is_finished)


class SharedEnvelope(dict[str, Any]):
    """An envelope handed to many subscribers: its JSON text is encoded once, on first use."""

    _text: str | None = None

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = json.dumps(self)
        return self._text


def envelope_text(envelope: Envelope) -> str:
    return envelope.text if isinstance(envelope, SharedEnvelope) else json.dumps(envelope)


_SESSION_GONE: Envelope = {"seq": 0}
_IDLE: Envelope = {"seq": 0}  # no event for a while: the reader yields a heartbeat


class Subscription:
    """One client's view of a session's events: replay after ``after_seq``, then live, once each."""

    def __init__(self, session_id: UUID, after_seq: int) -> None:
        self.session_id = session_id
        self.last_seq = after_seq
        self._inbox: asyncio.Queue[Envelope] = asyncio.Queue(maxsize=INBOX_LIMIT)
        self._is_behind = False
        self._is_gone = False

    def offer(self, envelope: Envelope) -> None:
        """Called by the hub for every event it hears of, in any order, possibly twice."""
        if envelope["seq"] <= self.last_seq:
            return
        try:
            self._inbox.put_nowait(envelope)
        except asyncio.QueueFull:
            self._is_behind = True

    def end(self) -> None:
        """The session was deleted: finish after whatever is already queued."""
        self._is_gone = True
        with contextlib.suppress(asyncio.QueueFull):
            self._inbox.put_nowait(_SESSION_GONE)

    async def events(self, *, idle_seconds: float) -> AsyncIterator[Envelope | None]:
        """Every event after ``after_seq`` in seq order; ``None`` after ``idle_seconds`` of silence.

        Ends only when the session is deleted.
        """
        async for envelope in self._read_store():
            yield envelope
        while True:
            if self._is_gone and self._inbox.empty():
                return
            if self._is_behind and self._inbox.empty():
                self._is_behind = False
                async for envelope in self._read_store():
                    yield envelope
            try:
                envelope = self._inbox.get_nowait()
            except asyncio.QueueEmpty:
                envelope = await self._next_or_idle(idle_seconds)
            if envelope is _IDLE:
                yield None
                continue
            if envelope is _SESSION_GONE:
                continue
            seq = envelope["seq"]
            if seq <= self.last_seq:
                continue
            if seq > self.last_seq + 1:
                # A missed announcement (or several processes announcing out of order).
                # Numbers commit in order, so the store already holds everything up to seq.
                async for stored in self._read_store():
                    yield stored
                if seq <= self.last_seq:
                    continue
            self.last_seq = seq
            yield envelope

    async def _next_or_idle(self, idle_seconds: float) -> Envelope:
        """The next envelope, or ``_IDLE`` once ``idle_seconds`` pass without one.

        A plain timer instead of ``asyncio.timeout``: this wait happens once per event per
        subscriber, and the timeout's bookkeeping cost more than the wait itself. A marker that
        races an event is read later as one extra heartbeat, which clients ignore.
        """
        timer = asyncio.get_running_loop().call_later(idle_seconds, self._offer_idle)
        try:
            return await self._inbox.get()
        finally:
            timer.cancel()

    def _offer_idle(self) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self._inbox.put_nowait(_IDLE)

    async def _read_store(self) -> AsyncIterator[Envelope]:
        while True:
            page = await fetch_events_after(self.session_id, self.last_seq, PAGE_SIZE)
            for envelope in page:
                self.last_seq = envelope["seq"]
                yield envelope
            if len(page) < PAGE_SIZE:
                return


@dataclass
class _SessionFeed:
    known_seq: int
    subscribers: set[Subscription] = field(default_factory=set)

    def dispatch(self, envelope: Envelope) -> None:
        self.known_seq = max(self.known_seq, envelope["seq"])
        shared = SharedEnvelope(envelope)
        for subscriber in list(self.subscribers):
            subscriber.offer(shared)


def _start_hub_task(coroutine: Coroutine[Any, Any, None]) -> "asyncio.Task[None]":
    """A task of the hub, in a context of its own: it outlives the request or socket that
    started it, so it must not inherit that request's thread (``ThreadSensitiveContext``),
    which the request's end hands to the next request."""
    return asyncio.get_running_loop().create_task(coroutine, context=contextvars.Context())


class StreamHub:
    """This process's watcher of the sessions its clients follow."""

    def __init__(self, layer: BaseChannelLayer | None = None) -> None:
        """``layer``: the channel layer to listen on; by default this process's cross-process
        one, if it has one."""
        self._feeds: dict[UUID, _SessionFeed] = {}
        # Guards feed creation and removal together with the layer's group membership.
        self._membership_lock = asyncio.Lock()
        if layer is None and has_cross_process_layer():
            layer = get_channel_layer()
        self._layer = layer
        self._layer_channel: str | None = None
        self._poll_task: asyncio.Task[None] | None = None
        self._listen_task: asyncio.Task[None] | None = None
        # With a layer: each session's last seq as the previous poll read it.
        self._seqs_at_last_poll: dict[UUID, int] = {}

    @asynccontextmanager
    async def subscribe(self, session_id: UUID, after_seq: int) -> AsyncIterator[Subscription]:
        subscription = Subscription(session_id, after_seq)
        await self._attach(subscription)
        try:
            yield subscription
        finally:
            self._detach(subscription)

    @property
    def watched_session_count(self) -> int:
        return len(self._feeds)

    async def _attach(self, subscription: Subscription) -> None:
        session_id = subscription.session_id
        async with self._membership_lock:
            feed = self._feeds.get(session_id)
            if feed is None:
                if self._layer is not None:
                    await self._layer.group_add(
                        session_group_name(session_id), await self._ensure_layer_channel()
                    )
                # Read after joining the group: anything newer is announced or polled;
                # anything up to here is in the store for the subscriber's own replay.
                feed = _SessionFeed(known_seq=await fetch_latest_event_seq(session_id))
                self._feeds[session_id] = feed
            feed.subscribers.add(subscription)
        self._ensure_poller()

    def _detach(self, subscription: Subscription) -> None:
        feed = self._feeds.get(subscription.session_id)
        if feed is None:
            return
        feed.subscribers.discard(subscription)
        if not feed.subscribers and self._layer is not None:
            _start_hub_task(self._leave_if_unwatched(subscription.session_id))
        elif not feed.subscribers:
            del self._feeds[subscription.session_id]

    async def _leave_if_unwatched(self, session_id: UUID) -> None:
        async with self._membership_lock:
            feed = self._feeds.get(session_id)
            if feed is None or feed.subscribers:
                return
            del self._feeds[session_id]
            if self._layer is not None and self._layer_channel is not None:
                await self._layer.group_discard(session_group_name(session_id), self._layer_channel)

    async def _ensure_layer_channel(self) -> str:
        assert self._layer is not None
        if self._layer_channel is None:
            self._layer_channel = await self._layer.new_channel()
            self._listen_task = _start_hub_task(self._listen(self._layer_channel))
        return self._layer_channel

    def _ensure_poller(self) -> None:
        if self._poll_task is None or self._poll_task.done():
            self._poll_task = _start_hub_task(self._poll())

    async def _listen(self, channel: str) -> None:
        assert self._layer is not None
        while True:
            try:
                message = await self._layer.receive(channel)
                for envelope in message["events"]:
                    feed = self._feeds.get(UUID(envelope["session_id"]))
                    if feed is not None:
                        feed.dispatch(envelope)
            except asyncio.CancelledError:
                raise
            except Exception:  # the poller keeps streams alive meanwhile
                logger.warning("channel layer receive failed; retrying", exc_info=True)
                await asyncio.sleep(LAYER_RETRY_SECONDS)

    async def _poll(self) -> None:
        """Read the store for sessions whose counter moved past what was dispatched."""
        while self._feeds:
            started = time.monotonic()
            try:
                await self._poll_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # a database hiccup must not end every stream
                logger.warning("event store poll failed; retrying", exc_info=True)
            await asyncio.sleep(max(0.0, settings.STREAM_POLL_SECONDS - (time.monotonic() - started)))

    async def _poll_once(self) -> None:
        """Deliver what the store holds beyond each feed's known seq: at once without a layer;
        with one, what was already committed at the previous poll (a missed announcement)."""
        watched = list(self._feeds)
        latest = await fetch_latest_event_seqs(watched)
        for session_id in watched:
            feed = self._feeds.get(session_id)
            if session_id not in latest and feed is not None:
                for subscriber in list(feed.subscribers):
                    subscriber.end()
        due = latest
        if self._layer is not None:
            previous = self._seqs_at_last_poll
            due = {session_id: seq for session_id, seq in previous.items() if session_id in latest}
            self._seqs_at_last_poll = latest
        for session_id, seq in due.items():
            feed = self._feeds.get(session_id)
            while feed is not None and seq > feed.known_seq:
                page = await fetch_events_after(session_id, feed.known_seq, PAGE_SIZE)
                for envelope in page:
                    feed.dispatch(envelope)
                if len(page) < PAGE_SIZE:
                    # Pruned history leaves holes: never ask for the same range again.
                    feed.known_seq = max(feed.known_seq, seq)
                feed = self._feeds.get(session_id)


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StreamHub]" = weakref.WeakKeyDictionary()


def stream_hub() -> StreamHub:
    """The hub of the running event loop (an ASGI server runs one loop per process)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        hub = _hubs[loop] = StreamHub()
    return hub


async def run_events(
    run_id: UUID, session_id: UUID, after_seq: int, *, idle_seconds: float
) -> AsyncGenerator[Envelope | None, None]:
    """The run's events after ``after_seq`` then live ones, ending with its terminal event.

    Yields ``None`` when nothing was sent for ``idle_seconds``. A run that had already
    finished ends after its stored events (or at once if they were pruned or already seen).
    """
    was_finished = await fetch_run_is_finished(run_id)
    session_seq = await fetch_latest_event_seq(session_id)
    last_seq = after_seq
    while True:
        page = await fetch_run_events_after(run_id, last_seq, PAGE_SIZE)
        for envelope in page:
            last_seq = envelope["seq"]
            yield envelope
            if envelope["type"] in TERMINAL_RUN_EVENT_TYPES:
                return
        if len(page) < PAGE_SIZE:
            break
    if was_finished:
        return
    # Every run event up to max(session_seq, last_seq) was committed when the pages were
    # read, so the live part starts there and skips other runs' history.
    run_key = str(run_id)
    last_sent = time.monotonic()
    async with stream_hub().subscribe(session_id, max(session_seq, last_seq)) as subscription:
        async for envelope in subscription.events(idle_seconds=idle_seconds):
            if envelope is not None and envelope["run_id"] == run_key:
                last_sent = time.monotonic()
                yield envelope
                if envelope["type"] in TERMINAL_RUN_EVENT_TYPES:
                    return
            elif time.monotonic() - last_sent >= idle_seconds:
                last_sent = time.monotonic()
                yield None


EventSource = Callable[[float], AsyncGenerator[Envelope | None, None]]


async def while_authorized(
    open_events: EventSource,
    *,
    is_authorized: Callable[[], Awaitable[bool]],
    heartbeat_seconds: float,
) -> AsyncGenerator[Envelope | None, None]:
    """The events of ``open_events(idle_seconds)`` while the client may still read them.

    Authorization is asked again every ``STREAM_REAUTHORIZE_SECONDS`` and before each heartbeat,
    so a revoked key or a removed member stops receiving within seconds; the stream then ends.
    Yields ``None`` (a heartbeat) after ``heartbeat_seconds`` of silence.
    """
    recheck_seconds = settings.STREAM_REAUTHORIZE_SECONDS
    last_check = last_sent = time.monotonic()
    async with aclosing(open_events(min(heartbeat_seconds, recheck_seconds))) as events:
        async for envelope in events:
            now = time.monotonic()
            is_heartbeat_due = envelope is None and now - last_sent >= heartbeat_seconds
            if now - last_check >= recheck_seconds or is_heartbeat_due:
                if not await _is_still_authorized(is_authorized):
                    return
                last_check = now
            if envelope is not None or is_heartbeat_due:
                last_sent = now
                yield envelope


async def _is_still_authorized(is_authorized: Callable[[], Awaitable[bool]]) -> bool:
    try:
        return await is_authorized()
    except DatabaseError:
        # The database is unreachable for a moment: the next check decides, rather than every
        # stream of the deployment closing at once.
        logger.warning("could not check a stream's authorization; keeping it until the next check")
        return True


@dataclass(frozen=True)
class TokenAuthentication:
    """The outcome of presenting an API key: an actor, or why there is none."""

    actor: Actor | None
    is_valid_key: bool
    # Over 0: a wrong key, from an address that sent too many of them.
    retry_after: int = 0


def authenticate_token(token: str, *, address: str) -> TokenAuthentication:
    check = api_key_check(plaintext=token, address=address)
    if check.api_key is None:
        return TokenAuthentication(actor=None, is_valid_key=False, retry_after=check.retry_after)
    return TokenAuthentication(actor=actor_for_api_key(check.api_key), is_valid_key=True)


def parse_after(raw: str | None) -> int:
    """A non-negative seq from a query parameter or Last-Event-ID; ``ValueError`` otherwise."""
    if raw is None or raw == "":
        return 0
    after = int(raw)
    if after < 0:
        raise ValueError("negative seq")
    return after
