"""A throwaway Agentry stack of real processes, configured like production."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Literal

import httpx

from bench.common.databases import BenchDatabase, PostgresBenchDatabase, SqliteBenchDatabase
from bench.common.processes import (
    COMMAND_TIMEOUT_SECONDS,
    PYTHON,
    ROOT,
    BenchError,
    ManagedProcess,
    free_port,
    log,
)
from bench.common.readings import MemorySample, tree_cpu_seconds, tree_memory

STACK_OWNED_VARIABLES = frozenset(
    {
        "DATABASE_URL",
        "REDIS_URL",
        "DEBUG",
        "SECRET_KEY",
        "ALLOWED_HOSTS",
        "FIELD_ENCRYPTION_KEYS",
        "AGENTRY_DATA_DIR",
        "Q_CLUSTER_NAME",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "DJANGO_SETTINGS_MODULE",
    }
)
# A benchmark polls far faster than a person; the general API ceiling would answer 429.
BENCH_THROTTLE_RATE = "10000000/min"
# A benchmark posts far more messages a minute than a person; the quota checks still run,
# against limits an operator would set for such a tenant (Tenant.settings, tenants.limits).
BENCH_TENANT_LIMITS = {"messages_per_minute_per_user": 1_000_000, "model_tokens_per_minute": 1_000_000_000}


# --- The stack ------------------------------------------------------------------------------------


@dataclass
class StackOptions:
    database_url: str | None = None
    redis_url: str | None = None
    model_base_url: str = ""
    extra_environment: dict[str, str] = field(default_factory=dict)
    keep_directory: bool = False
    # The worker process: ``worker`` as docs/configuration.md runs production (since the run
    # engine v2 it is what executes runs), or bare ``qcluster`` (enough for checkouts before it).
    worker_command: Literal["qcluster", "worker"] = "worker"
    # Tenant.settings on top of BENCH_TENANT_LIMITS.
    tenant_limits: dict[str, int] = field(default_factory=dict)


def raise_limits_script(limits: dict[str, int]) -> str:
    """``manage.py shell -c`` code that sets these limits in the bench tenant's settings."""
    return f"""
from tenants.models import Tenant
tenant = Tenant.objects.get(slug="bench")
tenant.settings = {{**(tenant.settings or {{}}), **{limits!r}}}
tenant.save(update_fields=["settings"])
"""


RAISE_LIMITS_SCRIPT = raise_limits_script(BENCH_TENANT_LIMITS)


class BenchStack:
    """Database, tenant, API key, uvicorn and a django-q2 cluster (bare or in ``manage.py worker``),
    torn down on exit."""

    def __init__(self, options: StackOptions) -> None:
        self.options = options
        self.directory = Path(tempfile.mkdtemp(prefix="agentry-bench-"))
        self.database: BenchDatabase = (
            PostgresBenchDatabase(options.database_url)
            if options.database_url and not options.database_url.startswith("sqlite:")
            else SqliteBenchDatabase(self.directory)
        )
        self.cluster_name = f"agentry-bench-{secrets.token_hex(4)}"
        self.port = free_port()
        self.api_key = ""
        self.server: ManagedProcess | None = None
        self.workers: ManagedProcess | None = None
        self._is_database_created = False

    @property
    def mode(self) -> str:
        is_embedded = isinstance(self.database, SqliteBenchDatabase) and not self.options.redis_url
        if is_embedded:
            return "embedded (SQLite + ORM broker)"
        broker = "Redis" if self.options.redis_url else "ORM broker"
        return f"{self.database.label.split(' + ')[0]} + {broker}"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def websocket_base_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def environment(self) -> dict[str, str]:
        from cryptography.fernet import Fernet

        environment = {key: value for key, value in os.environ.items() if key not in STACK_OWNED_VARIABLES}
        environment.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            PYTHONUNBUFFERED="1",
            DEBUG="false",
            SECRET_KEY=secrets.token_urlsafe(48),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            FIELD_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
            AGENTRY_DATA_DIR=str(self.directory / "data"),
            DATABASE_URL=self.database.url,
            Q_CLUSTER_NAME=self.cluster_name,
            ANTHROPIC_API_KEY="bench",
            ANTHROPIC_BASE_URL=self.options.model_base_url,
            API_THROTTLE_RATE=BENCH_THROTTLE_RATE,
        )
        if self.options.redis_url:
            environment["REDIS_URL"] = self.options.redis_url
        environment.update(self.options.extra_environment)
        return environment

    def __enter__(self) -> BenchStack:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _start(self) -> None:
        environment = self.environment()
        log(f"bench: {self.mode}; files in {self.directory}")
        self.database.create()
        self._is_database_created = True
        self._manage(environment, "migrate", "--noinput")
        output = self._manage(
            environment, "create_tenant", "bench", "--owner", "bench@example.com", "--api-key"
        )
        self.api_key = output.strip().splitlines()[-1].strip()
        if not self.api_key.startswith("agt_"):
            raise BenchError(f"create_tenant printed no API key:\n{output}")
        limits = {**BENCH_TENANT_LIMITS, **self.options.tenant_limits}
        self._manage(environment, "shell", "-c", raise_limits_script(limits))
        self.server = ManagedProcess(
            "uvicorn",
            [
                PYTHON,
                "-m",
                "uvicorn",
                "config.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--lifespan",
                "off",
                "--no-access-log",
                "--ws-per-message-deflate",
                "false",
            ],
            # The ASGI server shares a connection pool (config/settings.py: DATABASE_POOL).
            {"DATABASE_POOL": "true", **environment},
            self.directory / "server.log",
        ).start()
        command = self.options.worker_command
        # As `manage.py serve` starts its worker: connections kept between polls of the run queue.
        worker_environment = {"DATABASE_CONN_MAX_AGE": "600", **environment}
        self.workers = ManagedProcess(
            command, [PYTHON, "manage.py", command], worker_environment, self.directory / f"{command}.log"
        ).start()
        self._wait_for_server()

    def _manage(self, environment: dict[str, str], *arguments: str) -> str:
        completed = subprocess.run(
            [PYTHON, "manage.py", *arguments],
            cwd=ROOT,
            env=environment,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        if completed.returncode != 0:
            raise BenchError(
                f"manage.py {' '.join(arguments)} failed:\n{completed.stdout}\n{completed.stderr}"
            )
        return completed.stdout

    def _wait_for_server(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return
            time.sleep(0.05)
        raise BenchError(f"uvicorn did not answer /healthz within {timeout}s\n{self.logs()}")

    def check_alive(self) -> None:
        for process in (self.server, self.workers):
            if process is not None and not process.is_running():
                raise BenchError(f"{process.name} exited\n{self.logs()}")

    def memory(self) -> tuple[MemorySample, MemorySample]:
        """(server, workers): the uvicorn process tree and the worker (qcluster) process tree."""
        if self.server is None or self.workers is None:
            raise BenchError("the stack is not started")
        return tree_memory(self.server.pid), tree_memory(self.workers.pid)

    def cpu_seconds(self) -> tuple[float, float]:
        """(server, workers): CPU time used so far by the uvicorn and worker (qcluster) process trees."""
        if self.server is None or self.workers is None:
            raise BenchError("the stack is not started")
        return tree_cpu_seconds(self.server.pid), tree_cpu_seconds(self.workers.pid)

    def wait_until_idle(
        self, *, busy_fraction: float = 0.25, quiet_seconds: float = 1.0, timeout: float = 60.0
    ) -> float:
        """Wait until the server and worker trees use under ``busy_fraction`` of a core for
        ``quiet_seconds`` (the worker's django-q2 cluster starts its processes after the run host
        is ready): a burst then measures the runs, not start-up. Embedded, the ORM broker's
        pollers keep an idle stack at a few percent, so the bar is a quarter of a core, far below
        a process starting up. Returns the seconds waited."""
        started = time.monotonic()
        step = 0.25
        quiet_since = time.monotonic()
        before = sum(self.cpu_seconds())
        while time.monotonic() - started < timeout:
            time.sleep(step)
            now = sum(self.cpu_seconds())
            if now - before > busy_fraction * step:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_seconds:
                return time.monotonic() - started
            before = now
        raise BenchError(f"the stack did not become idle within {timeout:g} s\n{self.logs()}")

    def count_in_logs(self, text: str) -> dict[str, int]:
        """How often ``text`` occurs in each process's log, by log file name."""
        return {
            process.log_path.name: (
                process.log_path.read_text(errors="replace").count(text) if process.log_path.exists() else 0
            )
            for process in (self.server, self.workers)
            if process is not None
        }

    def logs(self) -> str:
        parts = [
            f"--- {process.log_path.name}\n{process.log_tail()}"
            for process in (self.server, self.workers)
            if process is not None
        ]
        return "\n".join(parts)

    def close(self) -> None:
        for process in (self.server, self.workers):
            if process is not None:
                process.stop()
        if self._is_database_created:
            try:
                self.database.drop()
            except Exception as error:  # cleanup reports and goes on
                log(f"bench: could not drop the bench database: {error}")
            self._is_database_created = False
        if self.options.keep_directory:
            log(f"bench: kept {self.directory}")
        else:
            shutil.rmtree(self.directory, ignore_errors=True)
