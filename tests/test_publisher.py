"""The worker's event publisher: announcements that queued up behind a send go out together."""

import asyncio
from typing import Any

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
