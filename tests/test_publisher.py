"""The event publisher: announcements go out in order through the channel layer's ``group_send``,
those that queued up behind a send together, and a layer that fails never fails their writer."""

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
from channels.layers import get_channel_layer
from django.conf import settings

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


needs_redis = pytest.mark.skipif(not settings.REDIS_URL, reason="pub/sub needs REDIS_URL")


@needs_redis
def test_a_channels_redis_subscriber_receives_what_publish_sends() -> None:
    """The message a stream listener reads (``sessions.streams``): the session's group, one
    ``session.events`` message holding the events in order."""
    envelopes = [
        {"seq": 4, "type": "run.status", "data": {"to": "executing"}},
        {"seq": 5, "type": "run.started"},
    ]

    async def subscribe_publish_receive() -> dict[str, Any]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add("session.publish-test", channel)
        try:
            await asyncio.to_thread(publisher.publish, "session.publish-test", envelopes)
            return await asyncio.wait_for(layer.receive(channel), timeout=5)
        finally:
            await layer.group_discard("session.publish-test", channel)

    assert asyncio.run(subscribe_publish_receive()) == {"type": "session.events", "events": envelopes}


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


class FailingLayer:
    """A channel layer whose sends fail as channels-redis's do when Redis refuses connections."""

    def __init__(self) -> None:
        self.attempts: list[list[int]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.attempts.append([event["seq"] for event in message["events"]])
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")


def test_a_layer_that_fails_pauses_announcements_instead_of_failing_the_emitter(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    layer = FailingLayer()
    monkeypatch.setattr(publisher, "get_channel_layer", lambda: layer)
    now = [1000.0]
    sender = publisher._Publisher(clock=lambda: now[0])

    sender.publish("session.a", [{"seq": 1}])  # fails: logged, not raised
    assert sender.wait_until_sent(timeout=5) is True
    now[0] += publisher.PAUSE_AFTER_FAILURE_SECONDS - 0.1
    sender.publish("session.a", [{"seq": 2}])  # paused: skipped
    now[0] += 0.2
    sender.publish("session.a", [{"seq": 3}])  # the pause is over: tried, fails again
    assert sender.wait_until_sent(timeout=5) is True

    assert layer.attempts == [[1], [3]]
    warnings = [record for record in caplog.records if record.name == "sessions.publisher"]
    assert [record.levelname for record in warnings] == ["WARNING"]  # once per outage
    assert "ConnectionError" in warnings[0].getMessage()


def test_announcements_queued_before_a_failure_are_skipped_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """What queued up behind the failing send is not tried against the same outage, one by one."""
    release = threading.Event()
    sent: list[str] = []

    class FailsAfterRelease:
        async def group_send(self, group: str, message: dict[str, Any]) -> None:
            while not release.is_set():
                await asyncio.sleep(0.005)
            sent.append(group)
            raise redis.ConnectionError("Connection refused")

    monkeypatch.setattr(publisher, "get_channel_layer", FailsAfterRelease)
    sender = publisher._Publisher()
    sender.publish("session.a", [{"seq": 1}])
    assert sender.wait_until_sent(timeout=0.05) is False  # the first send is under way
    sender.publish("session.b", [{"seq": 7}])
    sender.publish("session.c", [{"seq": 9}])

    release.set()

    assert sender.wait_until_sent(timeout=5) is True
    assert sent == ["session.a"]


def test_publishing_to_an_unreachable_redis_neither_raises_nor_holds_up_the_emitter(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]},
        }
    }
    sender = publisher._Publisher()

    started = time.monotonic()
    sender.publish("session.unreachable", [{"seq": 1}])
    published_seconds = time.monotonic() - started

    assert sender.wait_until_sent(timeout=publisher.SEND_TIMEOUT_SECONDS + 1) is True
    assert published_seconds < 0.25
    assert sender._is_paused() is True
