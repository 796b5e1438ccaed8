"""Shared parts of the benchmarks: a throwaway Agentry stack of real processes, statistics, memory.

A ``BenchStack`` creates a fresh database (an SQLite file in a temporary directory, or a dedicated
PostgreSQL database it creates and drops), migrates it, creates a tenant and an API key with
``manage.py create_tenant``, and starts uvicorn and ``manage.py worker`` (or bare ``manage.py qcluster``) as
subprocesses configured like production (DEBUG off, secrets set). Everything it started is stopped, and
everything it created is removed, when the ``with`` block ends, including on Ctrl-C or errors.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import httpx

# The checkout whose code the stack runs: this one, or another one's (``BENCH_APP_ROOT``, which
# bench/compare.py sets to measure two checkouts with the same bench, interpreter and packages).
ROOT = Path(os.environ.get("BENCH_APP_ROOT") or Path(__file__).parent.parent).resolve()
PYTHON = sys.executable
# Settings the stack decides; inherited values would point the bench at someone else's services.
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
STOP_GRACE_SECONDS = 10.0
COMMAND_TIMEOUT_SECONDS = 300.0


class BenchError(RuntimeError):
    """The benchmark could not measure what it set out to measure."""


# --- Statistics -----------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], fraction: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), ``fraction`` in [0, 1]."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    lower = int(position)
    upper = min(lower + 1, len(ordered) - 1)
    return ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower)


# --- Memory from /proc ----------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySample:
    """Resident memory of a process tree. PSS shares pages between forked workers fairly; RSS counts
    shared pages once per process, so the RSS of a forked tree overstates what it really uses."""

    rss_bytes: int
    pss_bytes: int
    process_count: int

    @property
    def rss_mb(self) -> float:
        return self.rss_bytes / 1_048_576

    @property
    def pss_mb(self) -> float:
        return self.pss_bytes / 1_048_576


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int | str) -> list[str] | None:
    """Fields 3… of /proc/PID/stat; the command name may hold spaces and parentheses."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None  # the process ended meanwhile
    return stat.rsplit(")", 1)[1].split()


def _parent_pids() -> dict[int, int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(entry.name)) is not None:
            parents[int(entry.name)] = int(fields[1])
    return parents


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants that are alive now."""
    parents = _parent_pids()
    tree, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, its_parent in parents.items() if its_parent == parent]
        tree.extend(children)
        frontier.extend(children)
    return [member for member in tree if member in parents]


def _status_kilobytes(path: Path, field_name: str) -> int:
    with contextlib.suppress(OSError):
        for line in path.read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    fields = _stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS if fields else 0.0


def tree_cpu_seconds(pid: int) -> float:
    return sum(cpu_seconds(member) for member in process_tree(pid))


def cpu_seconds_with_exited_children(pid: int) -> float:
    """User + system CPU time of the process and of its children that have exited and been reaped."""
    fields = _stat_fields(pid)
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS if fields else 0.0


def tree_cpu_seconds_with_exited(pid: int) -> float:
    """CPU time of a process tree, counting members that exited (a recycled worker) once reaped:
    a difference of two readings then holds their work too."""
    return sum(cpu_seconds_with_exited_children(member) for member in process_tree(pid))


def _command_name(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def postgres_cpu_seconds() -> float | None:
    """CPU time of every PostgreSQL server on this machine (all databases, all clients), with the
    backends that have exited (counted in their postmaster); None when none runs here."""
    parents = _parent_pids()
    postmasters = [
        pid
        for pid, parent in parents.items()
        if _command_name(pid) == "postgres" and _command_name(parent) != "postgres"
    ]
    if not postmasters:
        return None
    return sum(tree_cpu_seconds_with_exited(pid) for pid in postmasters)


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, summed over CPUs."""
    values = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return (total - idle) / CLOCK_TICKS, total / CLOCK_TICKS


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def python_loop_ms(steps: int = 1_000_000, repeats: int = 5) -> float:
    """The median time of a plain Python loop of ``steps`` additions: a yardstick of the
    machine's single-core speed, so runs on different machines (or VMs of one kind, which
    differ) can be compared. Measured before the stack starts, on a quiet machine."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        total = 0
        for step in range(steps):
            total += step
        timings.append((time.perf_counter() - started) * 1000)
    return median(timings)


def tree_memory(pid: int) -> MemorySample:
    members = process_tree(pid)
    rss = sum(_status_kilobytes(Path(f"/proc/{member}/status"), "VmRSS") for member in members)
    pss = sum(_status_kilobytes(Path(f"/proc/{member}/smaps_rollup"), "Pss") for member in members)
    return MemorySample(rss_bytes=rss * 1024, pss_bytes=pss * 1024, process_count=len(members))


# --- Processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ManagedProcess:
    """A subprocess in its own process group, logging to a file, stopped with its whole group."""

    def __init__(self, name: str, argv: list[str], environment: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.environment = environment
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError(f"{self.name} is not started")
        return self.process.pid

    def start(self) -> ManagedProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL what is left after the grace period."""
        if self.process is None:
            return
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        # Workers forked by the leader may outlive it; the group still names them.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_SECONDS)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into KeyboardInterrupt so ``finally`` blocks clean up as on Ctrl-C."""

    def interrupt(signal_number: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signal_number}")

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the results."""
    print(message, file=sys.stderr, flush=True)


def git_commit() -> str:
    """The short commit hash, with ``+dirty`` when the working tree has changes.

    ``BENCH_COMMIT`` names it when the tree measured is an export (``git archive``) with no ``.git``.
    """
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+dirty" if status else commit


# --- Databases ------------------------------------------------------------------------------------


class BenchDatabase:
    """A database that exists only for one benchmark run."""

    url: str
    label: str

    def create(self) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError


class SqliteBenchDatabase(BenchDatabase):
    def __init__(self, directory: Path) -> None:
        self.path = directory / "bench.sqlite3"
        self.url = f"sqlite:///{self.path}"
        self.label = "SQLite + ORM broker"

    def create(self) -> None:
        """``migrate`` creates the file."""

    def drop(self) -> None:
        """The temporary directory goes, and the file with it."""


DATABASE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class PostgresBenchDatabase(BenchDatabase):
    """Creates the database named in ``url`` (dropping a leftover first) and drops it at the end.

    The name must contain "bench": this class drops databases, and should never be pointed at a
    real one by a slip of the command line.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.name = parts.path.lstrip("/")
        if not DATABASE_NAME.match(self.name) or "bench" not in self.name:
            raise BenchError(
                f"the bench database name must contain 'bench' (letters, digits, _): {self.name!r}"
            )
        self.url = url
        self.label = "PostgreSQL"
        self._maintenance_url = urlunsplit(parts._replace(path="/postgres"))

    def _execute(self, statement: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self._maintenance_url, autocommit=True, connect_timeout=10) as connection:
            connection.execute(sql.SQL(statement).format(sql.Identifier(self.name)))

    def create(self) -> None:
        self.drop()
        self._execute("CREATE DATABASE {}")

    def drop(self) -> None:
        self._execute("DROP DATABASE IF EXISTS {} WITH (FORCE)")


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
