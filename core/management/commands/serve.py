"""Run everything the embedded default needs: the ASGI server and a worker.

Ctrl-C (or SIGTERM) stops both; if either exits, the other is stopped too.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

STOP_GRACE_SECONDS = 20


class Command(BaseCommand):
    help = "Serve the web UI, API and websockets (uvicorn) together with a django-q2 cluster."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", default=os.environ.get("PORT", "8000"))

    def handle(self, *args: Any, **options: Any) -> None:
        server = subprocess.Popen(  # noqa: S603 - fixed argv, no shell
            [
                sys.executable,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--host",
                options["host"],
                "--port",
                str(options["port"]),
                "--no-access-log",
                "--lifespan",
                "off",
                # Compressing every frame for every subscriber costs more CPU than it saves.
                "--ws-per-message-deflate",
                "false",
            ],
            start_new_session=True,
        )
        # `worker` = the run host, the run sweeper and a django-q2 cluster (sessions/management/commands).
        # The worker keeps its connections between polls of the run queue (config/settings.py).
        worker_environment = {"DATABASE_CONN_MAX_AGE": "600", **os.environ}
        cluster = subprocess.Popen(
            [sys.executable, "manage.py", "worker"], env=worker_environment, start_new_session=True
        )
        processes = [server, cluster]
        self.stdout.write(
            f"Agentry is running on http://{options['host']}:{options['port']}/ (Ctrl-C stops it)"
        )

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            while all(process.poll() is None for process in processes):
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop_all(processes)

    def _stop_all(self, processes: list[subprocess.Popen[bytes]]) -> None:
        """Ask each child to stop, then kill whole process groups so nothing is left running.

        Only the child itself gets SIGTERM: the worker stops its qcluster, which stops its own
        processes in a few seconds. Signalling the whole group at once killed the cluster's
        processes under it, and the cluster then waited on them until the grace period ran out.
        """
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            self._signal_group(process, signal.SIGKILL)
        self.stdout.write("Agentry stopped.")

    @staticmethod
    def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the group has already exited
            os.killpg(process.pid, signum)
