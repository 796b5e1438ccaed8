"""Run everything the embedded default needs: the ASGI server and a worker.

The address is printed once the server answers. Ctrl-C (or SIGTERM) stops both within 3 s; if
either exits, the other is stopped too.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

# Ctrl-C stops everything within 3 s: what does not stop in this time is killed, leaving a
# second for the kill and this command's own exit on a busy machine (2.5 s once took 3.02 s in
# all). A run cut short there is resumed by the next worker's sweeper (its lease expires), like a
# crash.
STOP_GRACE_SECONDS = 2.0
READY_TIMEOUT_SECONDS = 120
# Where to ask a server that listens on every address.
LOCAL_ADDRESSES = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "[::1]"}  # noqa: S104 - not a bind


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

        def stop(signum: int, frame: Any) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            host = LOCAL_ADDRESSES.get(options["host"], options["host"])
            if not self._wait_until_answering(f"http://{host}:{options['port']}/healthz", processes):
                raise CommandError("the server did not start; its output above says why")
            self.stdout.write(
                f"Agentry is running on http://{options['host']}:{options['port']}/ (Ctrl-C stops it)"
            )
            while all(process.poll() is None for process in processes):
                time.sleep(0.2)
        except KeyboardInterrupt:
            pass
        finally:
            self._stop_all(processes)
        self._exit_at_once()

    @staticmethod
    def _wait_until_answering(url: str, processes: list[subprocess.Popen[bytes]]) -> bool:
        """True once the server answers anything at all (a 400 for a host not allowed counts)."""
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if any(process.poll() is not None for process in processes):
                return False
            try:
                with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - our own server, a fixed http URL
                    return True
            except urllib.error.HTTPError:
                return True
            except OSError:
                time.sleep(0.1)
        return False

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

    def _exit_at_once(self) -> None:
        """Ends this process without the interpreter's teardown.

        Nothing is left to clean up: the children are gone and the output is flushed. Tearing
        down every module a Django project loads took longer than the whole stop is allowed.
        """
        self.stdout.flush()
        self.stderr.flush()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    @staticmethod
    def _signal_group(process: subprocess.Popen[bytes], signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # the group has already exited
            os.killpg(process.pid, signum)
