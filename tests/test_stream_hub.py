"""The stream hub's poll of the store: the delivery path of last resort.

With a channel layer, events reach subscribers through their announcements, and the poll reads
the store only for what the layer has not brought by the next poll. Without one (the embedded
default), the poll is the delivery path and reads whatever is new at once. The store is faked
here (its reads are the hub's module-level functions) so every read the hub makes is counted.
"""

import asyncio
from typing import Any
from uuid import UUID, uuid4

import pytest
from channels.layers import InMemoryChannelLayer

from sessions import streams
from sessions.events import session_group_name
from sessions.streams import StreamHub


class FakeStore:
    """A session's committed events, and the reads the hub made of them."""

    def __init__(self, session_id: UUID) -> None:
        self.session_id = session_id
        self.last_seq = 0
        self.reads_after: list[int] = []

    def commit(self, count: int) -> list[dict[str, Any]]:
        envelopes = [self.envelope(seq) for seq in range(self.last_seq + 1, self.last_seq + count + 1)]
        self.last_seq += count
        return envelopes

    def envelope(self, seq: int) -> dict[str, Any]:
        return {"seq": seq, "session_id": str(self.session_id), "run_id": "r", "type": "text.delta"}

    async def latest_event_seqs(self, session_ids: list[UUID]) -> dict[UUID, int]:
        return {session_id: self.last_seq for session_id in session_ids if session_id == self.session_id}

    async def latest_event_seq(self, session_id: UUID) -> int:
        return self.last_seq

    async def events_after(self, session_id: UUID, after_seq: int, limit: int) -> list[dict[str, Any]]:
        self.reads_after.append(after_seq)
        return [self.envelope(seq) for seq in range(after_seq + 1, min(self.last_seq, after_seq + limit) + 1)]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch, settings: Any) -> FakeStore:
    # The hub's own poller reads once when it starts, then waits: the test's polls are the rest.
    settings.STREAM_POLL_SECONDS = 3600
    fake = FakeStore(uuid4())
    monkeypatch.setattr(streams, "fetch_latest_event_seqs", fake.latest_event_seqs)
    monkeypatch.setattr(streams, "fetch_latest_event_seq", fake.latest_event_seq)
    monkeypatch.setattr(streams, "fetch_events_after", fake.events_after)
    return fake


class Reader:
    """Reads a subscription on a task of its own, as a websocket consumer does."""

    def __init__(self, subscription: streams.Subscription) -> None:
        self.seqs: list[int] = []
        self._task = asyncio.create_task(self._read(subscription))

    async def _read(self, subscription: streams.Subscription) -> None:
        async for envelope in subscription.events(idle_seconds=3600):
            assert envelope is not None
            self.seqs.append(envelope["seq"])

    async def until_delivered(self, count: int) -> list[int]:
        async with asyncio.timeout(5):
            while len(self.seqs) < count:
                await asyncio.sleep(0.001)
        return self.seqs

    def stop(self) -> None:
        self._task.cancel()


async def announce(layer: InMemoryChannelLayer, envelopes: list[dict[str, Any]], session_id: UUID) -> None:
    await layer.group_send(session_group_name(session_id), {"type": "events", "events": envelopes})


def test_with_a_layer_the_poll_reads_only_events_the_layer_has_not_brought_by_the_next_poll(
    store: FakeStore,
) -> None:
    async def scenario() -> None:
        layer = InMemoryChannelLayer()
        hub = StreamHub(layer=layer)
        async with hub.subscribe(store.session_id, after_seq=0) as subscription:
            reader = Reader(subscription)
            await reader.until_delivered(0)
            await asyncio.sleep(0)  # the reader's replay and the poller's first read: nothing yet
            assert store.reads_after == [0]

            announced = store.commit(2)
            await hub._poll_once()  # the announcement is not in yet: no read
            await announce(layer, announced, store.session_id)
            assert await reader.until_delivered(2) == [1, 2]
            await hub._poll_once()  # what the previous poll saw was delivered by the layer: no read
            assert store.reads_after == [0]

            store.commit(1)  # committed, never announced
            await hub._poll_once()
            assert store.reads_after == [0]
            await hub._poll_once()  # still missing a poll later: read from the store
            assert store.reads_after == [0, 2]
            assert await reader.until_delivered(3) == [1, 2, 3]
            reader.stop()

    asyncio.run(scenario())


def test_without_a_layer_the_poll_reads_new_events_at_once(
    store: FakeStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams, "has_cross_process_layer", lambda: False)

    async def scenario() -> None:
        hub = StreamHub()
        async with hub.subscribe(store.session_id, after_seq=0) as subscription:
            reader = Reader(subscription)
            await asyncio.sleep(0)
            assert store.reads_after == [0]

            store.commit(2)
            await hub._poll_once()
            assert store.reads_after == [0, 0]
            assert await reader.until_delivered(2) == [1, 2]
            reader.stop()

    asyncio.run(scenario())
