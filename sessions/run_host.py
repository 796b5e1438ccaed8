"""Many runs at once in one worker process.

A run spends nearly all its life waiting on a model or a tool, so a worker process executes
runs on ``RUN_CONCURRENCY`` threads fed from the run queue, a django-q2 broker queue of its own.
The process keeps the leases of all its runs with one statement every ``RUN_LEASE_RENEW_SECONDS``
and looks for cancels and lost leases with one read every ``RUN_HEARTBEAT_SECONDS``; cancels
arrive at once through the channel layer (``run_stop_notify``, ``RunStopListener``). A waiting
run writes nothing on a timer. The worker command announces the host while it serves
(``sessions.run_host_heartbeats``).
"""

import asyncio
import contextlib
import logging
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone
from django_q.brokers import Broker, get_broker
from django_q.brokers.redis_broker import Redis as RedisBroker
from django_q.signing import BadSignature, SignedPackage
from redis.exceptions import RedisError, ResponseError

from agents.runtime.types import StopRequestReason
from sessions.models import Run, RunStatus
from sessions.publisher import has_cross_process_layer

logger = logging.getLogger(__name__)

# Identifies this process in lease owners: "<host>:<pid>:<process nonce>:<claim nonce>".
PROCESS_LEASE_PREFIX = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}:"
LEASED_STATUSES = (RunStatus.PLANNING, RunStatus.EXECUTING, RunStatus.CANCELLING)


def run_queue_name() -> str:
    """The broker queue that carries runs to run hosts, beside the cluster's own queue."""
    return f"{settings.Q_CLUSTER['name']}-runs"


@cache
def run_queue_broker() -> Broker:
    """One broker (and connection) per process for the run queue."""
    return get_broker(run_queue_name())


def new_lease_owner() -> str:
    return f"{PROCESS_LEASE_PREFIX}{uuid.uuid4().hex[:8]}"


def lease_expiry() -> Any:
    return timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)


@dataclass
class RunHandle:
    """One run executing in this process: its lease owner and the stop asked of it, if any."""

    run_id: UUID
    lease_owner: str
    stop_reason: StopRequestReason | None = None

    def request_stop(self, reason: StopRequestReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason


class ActiveRuns:
    """The runs this process executes; a heartbeat thread keeps their leases and stop flags."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._handles: dict[UUID, RunHandle] = {}
        self._heartbeat: threading.Thread | None = None
        self._last_renewal = time.monotonic()

    def register(self, run_id: UUID, *, lease_owner: str) -> RunHandle:
        handle = RunHandle(run_id=run_id, lease_owner=lease_owner)
        with self._lock:
            self._handles[run_id] = handle
            if self._heartbeat is None or not self._heartbeat.is_alive():
                self._heartbeat = threading.Thread(
                    target=self._beat, name="agentry-run-heartbeat", daemon=True
                )
                self._heartbeat.start()
        return handle

    def unregister(self, handle: RunHandle) -> None:
        with self._lock:
            if self._handles.get(handle.run_id) is handle:
                del self._handles[handle.run_id]

    def handles(self) -> list[RunHandle]:
        with self._lock:
            return list(self._handles.values())

    def request_stop(self, run_id: UUID, reason: StopRequestReason) -> bool:
        """Stop the run if this process executes it; returns whether it does."""
        with self._lock:
            handle = self._handles.get(run_id)
        if handle is not None:
            handle.request_stop(reason)
        return handle is not None

    def request_stop_all(self, reason: StopRequestReason) -> None:
        for handle in self.handles():
            handle.request_stop(reason)

    def _beat(self) -> None:
        while True:
            time.sleep(settings.RUN_HEARTBEAT_SECONDS)
            handles = self.handles()
            if not handles:
                continue
            try:
                self.check(handles)
                close_old_connections()
            # The heartbeat outlives any failure (a database restart, a bad row): the next beat
            # tries again, and until then the runs' leases and stop flags stay as they were.
            except Exception:
                logger.warning("run heartbeat failed; retrying", exc_info=True)

    def check(self, handles: list[RunHandle]) -> None:
        """One read for cancels and lost leases, and, when due, one write renewing the leases."""
        rows = Run.objects.filter(pk__in=[handle.run_id for handle in handles]).values_list(
            "id", "status", "lease_owner"
        )
        found = {run_id: (status, owner) for run_id, status, owner in rows}
        for handle in handles:
            if handle.run_id not in found:
                continue  # not visible to this connection (yet): nothing to conclude
            status, owner = found[handle.run_id]
            if status == RunStatus.CANCELLING:
                handle.request_stop("cancelled")
            elif owner != handle.lease_owner or status not in LEASED_STATUSES:
                handle.request_stop("lease_lost")
        if time.monotonic() - self._last_renewal >= settings.RUN_LEASE_RENEW_SECONDS:
            self.renew_leases(handles)

    def renew_leases(self, handles: list[RunHandle]) -> int:
        self._last_renewal = time.monotonic()
        return Run.objects.filter(
            pk__in=[handle.run_id for handle in handles if handle.stop_reason is None],
            lease_owner__startswith=PROCESS_LEASE_PREFIX,
            status__in=LEASED_STATUSES,
        ).update(lease_expires_at=lease_expiry())


active_runs = ActiveRuns()


# The channel-layer group every run host listens on for stop requests.
RUN_CONTROL_GROUP = "agentry.run-control"
RUN_STOP_MESSAGE = "run.stop"
# A stop announcement never holds up the request that cancelled: the heartbeat is the fallback.
ANNOUNCE_TIMEOUT_SECONDS = 1.0


def run_stop_notify(run_id: UUID) -> None:
    """A run was asked to stop (its cancel committed): the process executing it stops it at once,
    this one directly, any other through the channel layer."""
    if active_runs.request_stop(run_id, "cancelled") or not has_cross_process_layer():
        return
    message = {"type": RUN_STOP_MESSAGE, "run_id": str(run_id)}
    try:
        async_to_sync(_send_with_timeout)(message)
    except (RedisError, OSError, TimeoutError):
        logger.warning("could not announce the stop of run %s; its worker's heartbeat will see it", run_id)


async def _send_with_timeout(message: dict[str, str]) -> None:
    layer = get_channel_layer()
    assert layer is not None
    await asyncio.wait_for(layer.group_send(RUN_CONTROL_GROUP, message), ANNOUNCE_TIMEOUT_SECONDS)


class RunStopListener:
    """Hears stop requests on the channel layer for the runs of this process (a thread of its own)."""

    RETRY_SECONDS = 2.0

    def __init__(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="agentry-run-control", daemon=True)

    def start(self) -> None:
        if has_cross_process_layer():
            self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                asyncio.run(self._listen())
            # Redis went away or the layer failed: listen again; meanwhile the heartbeat's read
            # finds cancels in the database.
            except Exception:
                logger.warning("run stop listener failed; listening again", exc_info=True)
            time.sleep(self.RETRY_SECONDS)

    @staticmethod
    async def _listen() -> None:
        layer = get_channel_layer()
        assert layer is not None
        channel = await layer.new_channel()
        await layer.group_add(RUN_CONTROL_GROUP, channel)
        while True:
            message = await layer.receive(channel)
            if message.get("type") == RUN_STOP_MESSAGE:
                with contextlib.suppress(ValueError, TypeError):
                    active_runs.request_stop(UUID(str(message.get("run_id"))), "cancelled")


# Run tasks taken from a Redis run queue in one round trip, at most: a burst is taken in a few
# trips, and several worker hosts still share it.
TAKEN_AT_ONCE = 16


# A run task handed to a run thread: the broker it came from, its ack id and its package.
Job = tuple[Broker, Any, dict[str, Any]]


class RunHost:
    """Takes runs from the run queue while it has room, and executes each on a thread of its own.

    The run threads start with the host, not with the runs: a pool that starts a thread per
    task makes the taking thread wait for each new thread to run, which, while hundreds of runs
    hold the interpreter lock in turn, kept a burst's tasks waiting in the queue after a restart.
    """

    def __init__(self, *, concurrency: int, execute: Callable[..., Any]) -> None:
        self.concurrency = concurrency
        self._execute = execute
        self._slots = threading.BoundedSemaphore(concurrency)
        self._running = 0
        self._running_lock = threading.Lock()
        self._all_done = threading.Condition(self._running_lock)
        self._stopping = threading.Event()
        # As many threads as slots, so a job taken from the queue always has a thread; None tells
        # a run thread to end.
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._take_jobs, name=f"agentry-run-{index}")
            for index in range(concurrency)
        ]

    @property
    def running(self) -> int:
        with self._running_lock:
            return self._running

    def serve(self) -> None:
        """Until ``stop``: wait for a free slot, take the next run task, hand it to a thread."""
        broker = run_queue_broker()
        for thread in self._threads:
            thread.start()
        while not self._stopping.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue  # full: backpressure, the queue waits for us (or for another host)
            try:
                tasks = self._dequeue(broker)
            except Exception:
                self._slots.release()
                logger.warning("could not read the run queue; retrying", exc_info=True)
                self._stopping.wait(1.0)
                continue
            if not tasks:
                self._slots.release()
                continue
            self._start(broker, tasks[0])
            for extra in tasks[1:]:  # a broker may hand out more than one: each needs a slot
                self._slots.acquire()
                self._start(broker, extra)

    def _dequeue(self, broker: Broker) -> list[tuple[Any, str]]:
        """From Redis, what waits, as many tasks as this host has room for; else the next task,
        waiting up to a second for one.

        django-q2's Redis broker pops one task per round trip, and after each trip this thread
        waits for the interpreter lock, which hundreds of runs hold in turn: taken one at a time,
        a burst's tasks waited in Redis for up to a second and a half (docs/benchmarks.md). The
        broker keeps its tasks in a Redis list (``list_key``), so one ``LPOP`` with a count
        (Redis 6.2 or newer) takes a burst's tasks in a few trips, and a lone task still comes
        the moment it is queued, through the broker's blocking pop.
        """
        if isinstance(broker, RedisBroker):
            room = min(self.concurrency - self.running, TAKEN_AT_ONCE)
            with contextlib.suppress(ResponseError):  # a Redis < 6.2: one at a time, as the broker does
                if waiting := broker.connection.lpop(broker.list_key, room):
                    return [(None, task) for task in waiting]
        return list(broker.dequeue() or [])

    def _start(self, broker: Broker, task: tuple[Any, str]) -> None:
        ack_id, payload = task
        try:
            package = SignedPackage.loads(payload)
        except (TypeError, BadSignature):
            logger.exception("dropping a run task that could not be read")
            broker.fail(ack_id)
            self._slots.release()
            return
        with self._running_lock:
            self._running += 1
        self._jobs.put((broker, ack_id, package))

    def _take_jobs(self) -> None:
        while (job := self._jobs.get()) is not None:
            self._run_task(*job)

    def _run_task(self, broker: Broker, ack_id: Any, package: dict[str, Any]) -> None:
        """Execute one run task; whatever fails, its slot is freed and the thread takes the next."""
        try:
            close_old_connections()
            self._execute(*package.get("args", ()), **package.get("kwargs", {}))
        except Exception:
            logger.exception("run task %s failed", package.get("name"))
        finally:
            try:
                broker.acknowledge(ack_id)
            except Exception:
                logger.warning("could not acknowledge run task %s", ack_id, exc_info=True)
            try:
                connection.close()
            except Exception:  # a broken connection: the pool or the database drops it
                logger.warning("could not close a run's database connection", exc_info=True)
            with self._running_lock:
                self._running -= 1
                self._all_done.notify_all()
            self._slots.release()

    def stop(self) -> None:
        """Take no more runs (``serve`` returns)."""
        self._stopping.set()

    def drain(self, *, grace_seconds: float, hand_back_seconds: float) -> int:
        """Let running runs end for ``grace_seconds``, then ask the rest to stop at their next step
        boundary and hand their runs back to the queue; returns how many were still running."""
        self.stop()
        if not self._wait_until_idle(grace_seconds):
            active_runs.request_stop_all("shutdown")
            self._wait_until_idle(hand_back_seconds)
        for _thread in self._threads:
            self._jobs.put(None)  # each run thread ends once its run, if any, has
        return self.running

    def _wait_until_idle(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        with self._running_lock:
            while self._running:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._all_done.wait(remaining)
        return True
