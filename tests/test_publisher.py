"""The worker's event publisher: announcements that queued up behind a send go out together."""

import asyncio
import threading
import time
from typing import Any

import pytest

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
