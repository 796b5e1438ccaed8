"""Run hosts announce themselves in the database, the same on SQLite and PostgreSQL, so any
process can tell whether anything serves the run queue (``core.workers``)."""

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection
from django.utils import timezone

from sessions.models import RunHostHeartbeat

logger = logging.getLogger(__name__)

# A crashed host's row is shown, as not alive, for this long; then the next host to start forgets it.
FORGET_SILENT_HOSTS_AFTER = timedelta(days=1)


def run_host_is_alive(last_heartbeat_at: datetime, *, now: datetime) -> bool:
    """Alive while its last beat is younger than three beats: one missed beat is not a death."""
    return now - last_heartbeat_at <= timedelta(seconds=3 * settings.RUN_HOST_HEARTBEAT_SECONDS)


def run_host_beat(
    *, host_id: uuid.UUID, capacity: int, active_runs: int, started_at: datetime
) -> RunHostHeartbeat:
    heartbeat, _created = RunHostHeartbeat.objects.update_or_create(
        id=host_id,
        defaults={
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "capacity": capacity,
            "active_runs": active_runs,
            "started_at": started_at,
            "last_heartbeat_at": timezone.now(),
        },
    )
    return heartbeat


def run_host_leave(*, host_id: uuid.UUID) -> None:
    RunHostHeartbeat.objects.filter(id=host_id).delete()


def run_hosts_forget_silent() -> int:
    deleted, _ = RunHostHeartbeat.objects.filter(
        last_heartbeat_at__lt=timezone.now() - FORGET_SILENT_HOSTS_AFTER
    ).delete()
    return deleted


class Heartbeat:
    """A run host's announcer: a thread that beats at once, then every ``RUN_HOST_HEARTBEAT_SECONDS``
    until ``stop``, which deletes the host's row."""

    def __init__(self, *, capacity: int, active_runs: Callable[[], int]) -> None:
        self.host_id = uuid.uuid4()
        self._capacity = capacity
        self._active_runs = active_runs
        self._started_at = timezone.now()
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._beat_until_stopped, name="agentry-host-heartbeat", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=settings.RUN_HOST_HEARTBEAT_SECONDS + 5)
        self._quietly(
            lambda: run_host_leave(host_id=self.host_id), "could not remove the run host's heartbeat"
        )

    def _beat_until_stopped(self) -> None:
        self._quietly(run_hosts_forget_silent, "could not forget silent run hosts")
        while not self._stopping.is_set():
            self._quietly(self._beat, "run host heartbeat failed; retrying")
            self._stopping.wait(settings.RUN_HOST_HEARTBEAT_SECONDS)

    def _beat(self) -> None:
        run_host_beat(
            host_id=self.host_id,
            capacity=self._capacity,
            active_runs=self._active_runs(),
            started_at=self._started_at,
        )

    @staticmethod
    def _quietly(write: Callable[[], object], failure: str) -> None:
        """A database outage must not stop the host: the next beat writes again."""
        close_old_connections()
        try:
            write()
        except DatabaseError:
            logger.warning(failure, exc_info=True)
        finally:
            connection.close()
