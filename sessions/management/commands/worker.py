"""What every worker host runs: a run host, the run sweeper and a django-q2 cluster.

The run host executes many runs at once in this process (``sessions.run_host``). The django-q2
cluster (a child process) runs the schedules and the short background tasks; it forks its
own workers, so it keeps plain per-process database connections (``DATABASE_POOL=false``):
a pool's sockets and threads must not cross a fork.
"""

import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections

from sessions.run_host import RunHost, RunStopListener
from sessions.run_host_heartbeats import Heartbeat
from sessions.schedules import ensure_schedules
from sessions.sweeper import sweep_runs
from sessions.tasks import execute_run

logger = logging.getLogger(__name__)

CLUSTER_STOP_SECONDS = 15
CLUSTER_ORM_POLL_SECONDS = 0.25


def cluster_environment() -> dict[str, str]:
    """The django-q2 cluster forks its workers: no pool and no kept connection may cross a fork.
    It runs schedules and short tasks, which need no 20 ms pickup: its ORM broker polls less."""
    environment = {**os.environ, "DATABASE_POOL": "false", "DATABASE_CONN_MAX_AGE": "0"}
    environment.setdefault("Q_ORM_POLL_SECONDS", str(CLUSTER_ORM_POLL_SECONDS))
    return environment


class Command(BaseCommand):
    help = "Execute runs (RUN_CONCURRENCY at once), sweep expired leases, and run a django-q2 cluster."

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_schedules()
        cluster = subprocess.Popen([sys.executable, "manage.py", "qcluster"], env=cluster_environment())
        host = RunHost(concurrency=settings.RUN_CONCURRENCY, execute=execute_run)
        stopping = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            stopping.set()
            host.stop()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        sweeper = threading.Thread(target=self._sweep_until, args=(stopping, cluster), daemon=True)
        sweeper.start()
        RunStopListener().start()
        heartbeat = Heartbeat(capacity=host.concurrency, active_runs=lambda: host.running)
        heartbeat.start()
        logger.info("run host ready: %d runs at once", host.concurrency)
        try:
            host.serve()
        finally:
            stopping.set()
            left = host.drain(
                grace_seconds=settings.RUN_SHUTDOWN_GRACE_SECONDS,
                hand_back_seconds=settings.RUN_HAND_BACK_SECONDS,
            )
            heartbeat.stop()
            if left:
                logger.warning("%d runs still running at exit; the sweeper recovers them", left)
            self._stop_cluster(cluster)

    def _sweep_until(self, stopping: threading.Event, cluster: subprocess.Popen[bytes]) -> None:
        while not stopping.wait(settings.RUN_SWEEP_INTERVAL_SECONDS):
            if cluster.poll() is not None:
                logger.error("the django-q2 cluster exited (%s); stopping the worker", cluster.returncode)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            self._sweep()

    @staticmethod
    def _sweep() -> None:
        close_old_connections()
        try:
            report = sweep_runs()
        except DatabaseError:
            logger.warning("run sweep failed; retrying next interval", exc_info=True)
            return
        finally:
            close_old_connections()
        if report.requeued or report.failed or report.approvals_expired or report.redispatched:
            logger.info("sweep: %s", report)

    @staticmethod
    def _stop_cluster(cluster: subprocess.Popen[bytes]) -> None:
        if cluster.poll() is None:
            cluster.send_signal(signal.SIGTERM)
            try:
                cluster.wait(timeout=CLUSTER_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                cluster.kill()
