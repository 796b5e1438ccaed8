"""How a run host takes run tasks from its queue: a burst from Redis in few round trips, never more
than it has room for."""

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis as RedisBroker
from django_q.conf import Conf
from redis.exceptions import ResponseError

from core.tasks import enqueue_task
from sessions import run_host
from sessions.run_host import TAKEN_AT_ONCE, RunHost
from tests.live import wait_until
from tests.redis_server import PrivateRedis


def queued_run(run_id: str) -> None:
    """What the queued tasks name; the host under test executes its own function instead."""


def enqueue(broker: Any, count: int) -> list[str]:
    run_ids = [str(uuid.uuid4()) for _ in range(count)]
    for run_id in run_ids:
        enqueue_task(queued_run, run_id, task_name=f"run-{run_id}", broker=broker)
    return run_ids


@pytest.fixture
def redis_queue(private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisBroker]:
    """A run queue on django-q2's Redis broker, in a Redis of the test's own."""
    monkeypatch.setattr(Conf, "REDIS", private_redis.url)
    broker = RedisBroker(list_key=f"run-host-test-{uuid.uuid4().hex}")
    yield broker
    broker.connection.close()


def idle_host(concurrency: int) -> RunHost:
    return RunHost(concurrency=concurrency, execute=queued_run)


@contextmanager
def serving(
    host: RunHost, broker: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> Iterator[threading.Thread]:
    """``host`` serving ``broker``'s queue on a thread of its own; drained, with nothing left
    running, and joined at the end."""
    monkeypatch.setattr(run_host, "run_queue_broker", lambda: broker)
    thread = threading.Thread(target=host.serve)
    thread.start()
    try:
        yield thread
    finally:
        assert host.drain(grace_seconds=10, hand_back_seconds=1) == 0
        thread.join(timeout=10)


def test_a_burst_waiting_in_redis_comes_in_one_trip_as_far_as_the_host_has_room(
    redis_queue: RedisBroker,
) -> None:
    enqueue(redis_queue, 6)

    taken = idle_host(concurrency=4)._dequeue(redis_queue)

    assert len(taken) == 4
    assert redis_queue.queue_size() == 2


def test_one_trip_takes_at_most_taken_at_once(redis_queue: RedisBroker) -> None:
    enqueue(redis_queue, TAKEN_AT_ONCE + 10)

    taken = idle_host(concurrency=256)._dequeue(redis_queue)

    assert len(taken) == TAKEN_AT_ONCE
    assert redis_queue.queue_size() == 10


def test_a_lone_task_queued_while_the_host_waits_comes_at_once(redis_queue: RedisBroker) -> None:
    """Nothing waits: the host blocks on the broker's pop (up to a second), which the task ends."""
    queued = threading.Timer(0.2, enqueue, args=(redis_queue, 1))
    queued.start()
    try:
        taken = idle_host(concurrency=4)._dequeue(redis_queue)
    finally:
        queued.join()

    assert len(taken) == 1
    assert redis_queue.queue_size() == 0


def test_a_redis_that_cannot_pop_several_at_once_hands_them_over_one_at_a_time(
    redis_queue: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis before 6.2 knows no count for ``LPOP``: the rest stays queued for the next trips."""

    def old_lpop(name: str, count: int | None = None) -> Any:
        raise ResponseError("wrong number of arguments for 'lpop' command")

    enqueue(redis_queue, 3)
    monkeypatch.setattr(redis_queue.connection, "lpop", old_lpop)

    taken = idle_host(concurrency=4)._dequeue(redis_queue)

    assert len(taken) == 1
    assert redis_queue.queue_size() == 2


@pytest.mark.django_db
def test_the_orm_broker_hands_over_what_it_dequeues() -> None:
    broker = ORM(list_key=f"run-host-test-{uuid.uuid4().hex}")
    enqueue(broker, 3)

    taken = idle_host(concurrency=4)._dequeue(broker)

    assert len(taken) == 1
    assert broker.queue_size() == 2


def test_a_serving_host_executes_each_task_once_and_never_more_than_its_concurrency(
    redis_queue: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    lock = threading.Lock()
    executed: Counter[str] = Counter()
    running = [0, 0]  # now, most at once

    def execute(run_id: str) -> None:
        with lock:
            executed[run_id] += 1
            running[0] += 1
            running[1] = max(running)
        release.wait(timeout=30)
        with lock:
            running[0] -= 1

    run_ids = enqueue(redis_queue, 10)
    host = RunHost(concurrency=4, execute=execute)
    with serving(host, redis_queue, monkeypatch) as serve_thread:
        try:
            wait_until(lambda: running[0] == 4, timeout=10, message="four runs to start")
            assert redis_queue.queue_size() == 6  # a full host takes nothing more
        finally:
            release.set()
        wait_until(lambda: sum(executed.values()) == 10, timeout=10, message="every run to execute")

    assert not serve_thread.is_alive()
    wait_until(
        lambda: not any(thread.is_alive() for thread in host._threads),
        timeout=10,
        message="run threads to end",
    )
    assert executed == Counter(run_ids)
    assert running[1] == 4
    assert redis_queue.queue_size() == 0


class ClosingFails:
    """A database connection whose first close fails, as a broken one's can."""

    def __init__(self) -> None:
        self.closes = 0

    def close(self) -> None:
        self.closes += 1
        if self.closes == 1:
            raise DatabaseError("server closed the connection unexpectedly")


def test_a_task_whose_end_fails_frees_its_slot_for_the_next(
    redis_queue: RedisBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    closing = ClosingFails()
    monkeypatch.setattr(run_host, "connection", closing)
    executed: list[str] = []

    def execute(run_id: str) -> None:
        executed.append(run_id)
        raise RuntimeError("the run failed")

    run_ids = enqueue(redis_queue, 2)
    with serving(RunHost(concurrency=1, execute=execute), redis_queue, monkeypatch):
        wait_until(lambda: len(executed) == 2, timeout=10, message="both runs to execute")

    assert executed == run_ids
    assert closing.closes == 2
