"""A django-q2 cluster plus the run sweeper: what every worker host runs.

``manage.py qcluster`` alone runs tasks too; this adds prompt recovery of runs whose
worker died (the django-q2 schedule also sweeps, but at most once a minute).
"""

import logging
import signal
import subprocess
import sys
import threading
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections

from sessions.schedules import ensure_schedules
from sessions.sweeper import sweep_runs

logger = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Run a django-q2 cluster and sweep expired run leases every RUN_SWEEP_INTERVAL_SECONDS."

    def handle(self, *args: Any, **options: Any) -> None:
        ensure_schedules()
        cluster = subprocess.Popen([sys.executable, "manage.py", "qcluster"])
        stopping = threading.Event()

        def stop(signum: int, frame: Any) -> None:
            stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while not stopping.wait(settings.RUN_SWEEP_INTERVAL_SECONDS):
                if cluster.poll() is not None:
                    break
                self._sweep()
        finally:
            if cluster.poll() is None:
                cluster.send_signal(signal.SIGTERM)
                try:
                    cluster.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    cluster.kill()

    def _sweep(self) -> None:
        close_old_connections()
        try:
            report = sweep_runs()
        except DatabaseError:
            logger.warning("run sweep failed; retrying next interval", exc_info=True)
            return
        if report.requeued or report.failed or report.approvals_expired or report.redispatched:
            logger.info("sweep: %s", report)
