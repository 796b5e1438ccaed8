"""The worker's event publisher: announcements that queued up behind a send go out together."""

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
from channels.layers import get_channel_layer
from django.conf import settings

from core import redis_replies
from sessions import publisher
from sessions.publisher import _take_waiting


def _queue_of(*items: tuple[str, list[dict[str, Any]]] | None) -> "asyncio.Queue[Any]":
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    return queue


def test_a_groups_consecutive_announcements_become_one_message_in_order() -> None:
    queue = _queue_of(("a", [{"seq": 2}]), ("b", [{"seq": 7}]), ("b", [{"seq": 8}]), ("a", [{"seq": 3}]))

    batch, is_stopping = _take_waiting(("a", [{"seq": 1}]), queue)

    assert batch == [
        ("a", [{"seq": 1}, {"seq": 2}]),
        ("b", [{"seq": 7}, {"seq": 8}]),
        ("a", [{"seq": 3}]),
    ]
    assert is_stopping is False
    assert queue.empty()


def test_one_announcement_alone_is_sent_as_it_came() -> None:
    assert _take_waiting(("a", [{"seq": 1}]), _queue_of()) == ([("a", [{"seq": 1}])], False)


def test_what_came_before_the_stop_marker_is_still_sent() -> None:
    queue = _queue_of(("a", [{"seq": 2}]), None, ("a", [{"seq": 3}]))

    assert _take_waiting(("a", [{"seq": 1}]), queue) == ([("a", [{"seq": 1}, {"seq": 2}])], True)
    assert _take_waiting(None, _queue_of()) == ([], True)


class SlowLayer:
    """A channel layer whose every send takes ``seconds`` (or waits for ``release``)."""

    def __init__(self, seconds: float = 0.0, release: threading.Event | None = None) -> None:
        self.seconds = seconds
        self.release = release
        self.sent: list[tuple[str, list[int]]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if self.release is not None:
            while not self.release.is_set():
                await asyncio.sleep(0.005)
        await asyncio.sleep(self.seconds)
        self.sent.append((group, [event["seq"] for event in message["events"]]))


def test_wait_until_sent_returns_once_everything_published_so_far_was_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = SlowLayer(seconds=0.05)
    monkeypatch.setattr(publisher, "get_channel_layer", lambda: layer)
    sender = publisher._Publisher()

    sender.publish("a", [{"seq": 1}])
    sender.publish("b", [{"seq": 5}])
    sender.publish("a", [{"seq": 2}])

    assert sender.wait_until_sent(timeout=5) is True
    assert layer.sent == [("a", [1]), ("b", [5]), ("a", [2])]  # only consecutive ones merge


def test_wait_until_sent_gives_up_after_its_timeout_when_the_layer_hangs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    layer = SlowLayer(release=release)
    monkeypatch.setattr(publisher, "get_channel_layer", lambda: layer)
    sender = publisher._Publisher()

    sender.publish("a", [{"seq": 1}])
    started = time.monotonic()
    assert sender.wait_until_sent(timeout=0.1) is False
    assert 0.1 <= time.monotonic() - started < 1
    assert layer.sent == []

    release.set()
    assert sender.wait_until_sent(timeout=5) is True
    assert layer.sent == [("a", [1])]


def test_wait_until_sent_with_nothing_published_returns_at_once() -> None:
    started = time.monotonic()
    assert publisher._Publisher().wait_until_sent(timeout=5) is True
    assert time.monotonic() - started < 0.5


@pytest.mark.skipif(not settings.REDIS_URL, reason="pub/sub needs REDIS_URL")
def test_a_channels_redis_subscriber_receives_what_the_direct_publisher_sends() -> None:
    """The direct path writes the pub/sub layer's own wire format, on the layer's group channel."""
    assert publisher.direct_publisher() is not None
    envelopes = [
        {"seq": 4, "type": "run.status", "data": {"to": "executing"}},
        {"seq": 5, "type": "run.started"},
    ]

    async def subscribe_publish_receive() -> dict[str, Any]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("session.direct-test", channel)
        try:
            await asyncio.to_thread(publisher.publish, "session.direct-test", envelopes)
            return await asyncio.wait_for(layer.receive(channel), timeout=5)
        finally:
            await layer.group_discard("session.direct-test", channel)

    assert asyncio.run(subscribe_publish_receive()) == {"type": "session.events", "events": envelopes}


needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="needs REDIS_URL")


@needs_redis
def test_a_publish_returns_without_waiting_for_redis_and_still_arrives() -> None:
    """Redis holds writes for 0.5 s: the emitter goes on at once, the subscriber gets it after."""
    envelopes = [{"seq": 9, "type": "run.completed"}]
    admin = redis.Redis.from_url(settings.REDIS_URL)

    async def publish_while_paused() -> tuple[float, dict[str, Any]]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("session.paused-test", channel)
        try:
            admin.execute_command("CLIENT", "PAUSE", 500, "WRITE")
            started = time.monotonic()
            await asyncio.to_thread(publisher.publish, "session.paused-test", envelopes)
            publish_seconds = time.monotonic() - started
            return publish_seconds, await asyncio.wait_for(layer.receive(channel), timeout=5)
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
            await layer.group_discard("session.paused-test", channel)

    publish_seconds, received = asyncio.run(publish_while_paused())

    assert publish_seconds < 0.25
    assert received == {"type": "session.events", "events": envelopes}


@needs_redis
def test_replies_that_arrived_are_read_before_the_next_publish() -> None:
    connection = publisher.PublishConnection(settings.REDIS_URL)
    for number in range(50):
        connection.publish("agentry-test-replies", str(number).encode())
    assert connection.unread_replies >= 1
    time.sleep(0.1)  # Redis has answered all fifty by now

    connection.publish("agentry-test-replies", b"last")

    assert connection.unread_replies == 1
    connection.read_replies()
    assert connection.unread_replies == 0


@needs_redis
def test_a_forked_child_publishes_on_a_connection_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    connection = publisher.PublishConnection(settings.REDIS_URL)
    connection.publish("agentry-test-fork", b"parent")
    parents = connection._connection
    monkeypatch.setattr(redis_replies.os, "getpid", lambda: -1)

    connection.publish("agentry-test-fork", b"child")

    assert connection._connection is not parents
    assert parents._sock is not None  # the parent's socket was left open for the parent
    assert connection.unread_replies == 1


def test_a_publish_to_an_unreachable_redis_raises_for_the_publisher_to_pause() -> None:
    connection = publisher.PublishConnection("redis://127.0.0.1:1/0")

    with pytest.raises(redis.ConnectionError):
        connection.publish("agentry-test-unreachable", b"lost")
    assert connection.unread_replies == 0


class UnreachableRedis:
    def __init__(self) -> None:
        self.attempts = 0

    def publish(self, channel: str, message: bytes) -> int:
        self.attempts += 1
        raise redis.ConnectionError("Connection refused")


class Serializing:
    def serialize(self, message: dict[str, Any]) -> bytes:
        return repr(message).encode()


def test_a_direct_publisher_that_cannot_reach_redis_pauses_instead_of_failing_the_emitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = UnreachableRedis()
    direct = publisher.DirectPublisher(Serializing(), client, prefix="asgi")  # type: ignore[arg-type]
    now = [1000.0]
    monkeypatch.setattr(publisher.time, "monotonic", lambda: now[0])

    direct.publish("session.a", [{"seq": 1}])  # fails: logged, not raised
    now[0] += publisher.PAUSE_AFTER_FAILURE_SECONDS - 0.1
    direct.publish("session.a", [{"seq": 2}])  # paused: not attempted
    paused_attempts = client.attempts
    now[0] += 0.2
    direct.publish("session.a", [{"seq": 3}])  # the pause is over

    assert (paused_attempts, client.attempts) == (1, 2)
    assert direct.group_channel("session.a") == "asgi__group__session.a"
