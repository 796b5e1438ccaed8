"""Real processes for integration tests: an ASGI server and django-q2 clusters.

They run against the test database (SQLite file or PostgreSQL test database) and, when
REDIS_URL is set, the same Redis, so a test sees what a user of a deployment sees.
"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from django.conf import settings
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_database_url() -> str:
    """A DATABASE_URL that points another process at the database this test run uses."""
    database = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{database['NAME']}"
    user = database.get("USER") or ""
    password = f":{database['PASSWORD']}" if database.get("PASSWORD") else ""
    credentials = f"{user}{password}@" if user else ""
    host = database.get("HOST") or "127.0.0.1"
    port = database.get("PORT") or 5432
    return f"postgres://{credentials}{host}:{port}/{database['NAME']}"


# Every test signs in and sends keys from 127.0.0.1, and the throttle's counters outlive a test
# (the file cache and Redis are shared with other runs), so the suite's own wrong passwords and
# keys must never add up to a lockout: the test process (tests/conftest.py) uses these limits,
# and tests/test_sign_in_throttle.py sets its own.
UNREACHED_FAILURE_LIMITS = {
    "SIGN_IN_FAILURE_LIMIT": 1_000_000,
    "SIGN_IN_ADDRESS_FAILURE_LIMIT": 1_000_000,
    "API_KEY_FAILURE_LIMIT": 1_000_000,
}
# The servers the tests start never lock out a key either, and lock out an account at this many
# wrong passwords from one address (tests/browser/test_joining_and_signing_in.py shows it).
LIVE_SIGN_IN_FAILURE_LIMIT = 10


def child_environment(**overrides: str) -> dict[str, str]:
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PYTEST")}
    environment.update(
        {
            "DATABASE_URL": test_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONUNBUFFERED": "1",
            "DEBUG": "true",
            # The test process's own upload folder (tests/conftest.py), so both see the same files.
            "FILES_ROOT": settings.STORAGES["default"]["OPTIONS"]["location"],
        }
    )
    environment["API_KEY_FAILURE_LIMIT"] = str(UNREACHED_FAILURE_LIMITS["API_KEY_FAILURE_LIMIT"])
    environment["SIGN_IN_FAILURE_LIMIT"] = str(LIVE_SIGN_IN_FAILURE_LIMIT)
    if settings.REDIS_URL:
        environment["REDIS_URL"] = settings.REDIS_URL
    environment.update(overrides)
    return environment


class LiveProcess:
    def __init__(self, argv: list[str], environment: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.environment = environment
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "LiveProcess":
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        return self

    def kill(self) -> None:
        """SIGKILL the whole process group: no chance to clean up, like a crashed host."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


class LiveStack:
    """Starts workers (and optionally an ASGI server) sharing one environment."""

    def __init__(self, log_dir: Path, **environment: str) -> None:
        self.log_dir = log_dir
        # Workers share the test process's cluster name, hence its queue.
        self.environment = child_environment(**environment)
        self.workers: list[LiveProcess] = []
        self.server: LiveProcess | None = None
        self.port = 0

    def start_worker(self, *, workers: int = 2) -> LiveProcess:
        environment = dict(self.environment, Q_WORKERS=str(workers))
        log_path = self.log_dir / f"worker-{len(self.workers)}.log"
        # `worker` = the run host, the lease sweeper and a django-q2 cluster, as deployed.
        worker = LiveProcess([sys.executable, "manage.py", "worker"], environment, log_path).start()
        self.workers.append(worker)
        return worker

    def start_server(self, *, access_log: bool = False) -> LiveProcess:
        """uvicorn as the benchmarks run it; ``access_log`` as a bare ``uvicorn`` runs it (on)."""
        self.port = free_port()
        argv = [
            sys.executable,
            "-m",
            "uvicorn",
            "config.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--lifespan",
            "off",
            *([] if access_log else ["--no-access-log"]),
            "--ws-per-message-deflate",
            "false",
        ]
        self.server = LiveProcess(argv, self.environment, self.log_dir / "server.log").start()
        try:
            self._wait_for_server()
        except BaseException:
            self.server.stop()  # a failed start leaves no server behind
            raise
        return self.server

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def websocket_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def _wait_for_server(self, timeout: float = 60.0) -> None:
        """Until /healthz answers: seconds when idle, far longer on a busy machine."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            process = self.server.process if self.server is not None else None
            if process is not None and process.poll() is not None:
                break  # it exited: say so now, with its log
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        tail = self.server.log_tail() if self.server else ""
        raise RuntimeError(f"ASGI server did not start:\n{tail}")

    def stop(self) -> None:
        for process in [*self.workers, *([self.server] if self.server else [])]:
            process.stop()

    def logs(self) -> str:
        parts = [
            f"--- {p.log_path.name}\n{p.log_tail()}"
            for p in [*self.workers, *([self.server] if self.server else [])]
            if p
        ]
        return "\n".join(parts)


def wait_until(condition: Any, *, timeout: float = 20.0, interval: float = 0.05, message: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message or condition}")
