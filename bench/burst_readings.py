"""What bench/concurrency.py reads around a burst, and how it checks it.

CPU time of each part of the stack, PostgreSQL connections sampled from ``pg_stat_activity``, and
the runs, steps and events the burst left in the database (read over the bench's own connection),
checked against what each session's websocket delivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from websockets.asyncio.client import ClientConnection

from bench.common import (
    BenchError,
    BenchStack,
    PostgresBenchDatabase,
    SqliteBenchDatabase,
    cpu_seconds_with_exited_children,
    machine_busy_seconds,
    percentile,
    postgres_cpu_seconds,
    tree_cpu_seconds_with_exited,
)

TERMINAL_EVENT_TYPES = frozenset({"run.completed", "run.failed", "run.cancelled", "run.timeout"})
TERMINAL_RUN_STATUSES = frozenset({"completed", "failed", "cancelled", "timeout"})

CONNECTION_SAMPLE_SECONDS = 0.1

# Read from the bench process's own connection (sessions.models: Run, Step, RunEvent).
RUNS_STATEMENT = (
    "SELECT id, session_id, status, stop_reason, started_at, finished_at FROM agent_sessions_run"
    " WHERE parent_run_id IS NULL"
)
UNFINISHED_RUNS_STATEMENT = (
    "SELECT COUNT(*) FROM agent_sessions_run"
    " WHERE status NOT IN ('completed', 'failed', 'cancelled', 'timeout')"
)
STEPS_STATEMENT = "SELECT run_id, COUNT(*) FROM agent_sessions_step GROUP BY run_id"
EVENTS_STATEMENT = "SELECT session_id, run_id, seq, type FROM agent_sessions_runevent"


@dataclass
class Member:
    """One session of the burst: its socket, its post, and what the socket delivered."""

    session_id: str
    content: str
    websocket: ClientConnection | None = None
    reader: asyncio.Task[None] | None = None
    envelopes: list[dict[str, Any]] = field(default_factory=list)
    run_id: str = ""
    post_started: float = 0.0
    post_seconds: float | None = None
    post_error: str = ""
    # When its socket delivered the run's run.started, and its terminal event.
    started_at: float | None = None
    terminal_at: float | None = None
    # Counted once as done: its run's end seen, or its post failed.
    is_settled: bool = False


def burst_phases(members: list[Member], started: float) -> dict[str, float | None]:
    """When the last POST was answered (after the release), and medians of how long a run waited
    from its POST's answer to its ``run.started`` at the socket (the claim) and from there to its
    end (the model and the answer): which stage a burst's makespan is made of."""
    answered = [
        (member, member.post_started + member.post_seconds)
        for member in members
        if member.post_seconds is not None and not member.post_error
    ]
    claims = [member.started_at - at for member, at in answered if member.started_at is not None]
    runs = [
        member.terminal_at - member.started_at
        for member, _ in answered
        if member.started_at is not None and member.terminal_at is not None
    ]
    return {
        "last_post_answered": round(max(at for _, at in answered) - started, 3) if answered else None,
        "post_answered_to_started_p50": round(percentile(claims, 0.5), 3) if claims else None,
        "started_to_end_p50": round(percentile(runs, 0.5), 3) if runs else None,
    }


@dataclass(frozen=True)
class CpuReading:
    server: float
    workers: float
    postgres: float | None
    client: float
    fake_model: float
    busy: float
    total: float


def read_cpu(stack: BenchStack, *, fake_model_pid: int, posting_pid: int | None = None) -> CpuReading:
    """``posting_pid``: the bench's posting process (bench.burst_posts), counted as its client."""
    if stack.server is None or stack.workers is None:
        raise BenchError("the stack is not started")
    busy, total = machine_busy_seconds()
    return CpuReading(
        server=tree_cpu_seconds_with_exited(stack.server.pid),
        workers=tree_cpu_seconds_with_exited(stack.workers.pid),
        postgres=postgres_cpu_seconds() if isinstance(stack.database, PostgresBenchDatabase) else None,
        client=cpu_seconds_with_exited_children(os.getpid())
        + (tree_cpu_seconds_with_exited(posting_pid) if posting_pid else 0.0),
        fake_model=tree_cpu_seconds_with_exited(fake_model_pid),
        busy=busy,
        total=total,
    )


def cpu_per_run(before: CpuReading, after: CpuReading, *, runs: int) -> dict[str, float | None]:
    """CPU seconds per run of each part over the burst; the rest of the machine is other work
    (Redis, the kernel, whatever else runs on it)."""
    parts: dict[str, float | None] = {
        "server": after.server - before.server,
        "workers": after.workers - before.workers,
        "postgres": (
            after.postgres - before.postgres
            if after.postgres is not None and before.postgres is not None
            else None
        ),
        "client": after.client - before.client,
        "fake_model": after.fake_model - before.fake_model,
    }
    counted = sum(value for value in parts.values() if value is not None)
    parts["rest_of_machine"] = max(0.0, after.busy - before.busy - counted)
    return {name: None if value is None else value / runs for name, value in parts.items()}


# --- The database, read from the bench process ---------------------------------------------------


class DatabaseReader:
    """The bench database read directly (its own connection): run rows, events and steps."""

    def __init__(self, stack: BenchStack) -> None:
        self.database = stack.database
        if isinstance(self.database, SqliteBenchDatabase):
            self._sqlite = sqlite3.connect(
                f"file:{self.database.path}?mode=ro", uri=True, timeout=20, check_same_thread=False
            )
            self._postgres: psycopg.Connection[Any] | None = None
        else:
            self._postgres = psycopg.connect(self.database.url, autocommit=True, connect_timeout=10)

    def rows(self, statement: str) -> list[tuple[Any, ...]]:
        if self._postgres is not None:
            return list(self._postgres.execute(statement).fetchall())
        return list(self._sqlite.execute(statement).fetchall())

    def unfinished_runs(self) -> int:
        return int(self.rows(UNFINISHED_RUNS_STATEMENT)[0][0])

    def close(self) -> None:
        if self._postgres is not None:
            self._postgres.close()
        else:
            self._sqlite.close()


def _hex(value: Any) -> str:
    return uuid.UUID(str(value)).hex


def _epoch(value: Any) -> float | None:
    """A timestamp column as epoch seconds (SQLite holds naive UTC text, PostgreSQL aware datetimes)."""
    if value is None:
        return None
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def peak_overlap(intervals: list[tuple[float, float]]) -> int:
    """The most intervals holding one instant (one that ends as another starts does not overlap it)."""
    points = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, change in points:
        running += change
        peak = max(peak, running)
    return peak


class PostgresConnectionSampler:
    """The most connections to the bench database at once, sampled from ``pg_stat_activity``
    through a connection to the maintenance database (so the sampler is not counted)."""

    def __init__(self, database: PostgresBenchDatabase) -> None:
        self.name = database.name
        self.url = urlunsplit(urlsplit(database.url)._replace(path="/postgres"))
        self.peak = 0
        self.samples = 0
        self._task: asyncio.Task[None] | None = None

    async def count(self, connection: psycopg.AsyncConnection[Any]) -> int:
        cursor = await connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [self.name]
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0

    async def now(self) -> int:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as connection:
            return await self.count(connection)

    async def start(self) -> None:
        connection = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
        self._task = asyncio.create_task(self._sample(connection))

    async def _sample(self, connection: psycopg.AsyncConnection[Any]) -> None:
        async with connection:
            while True:
                self.peak = max(self.peak, await self.count(connection))
                self.samples += 1
                await asyncio.sleep(CONNECTION_SAMPLE_SECONDS)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# --- Correctness ----------------------------------------------------------------------------------


def check_burst(
    reader: DatabaseReader, members: list[Member], *, expected_steps: int
) -> tuple[dict[str, Any], int]:
    """Counts of what went wrong (all 0 when the burst was right), and the peak of runs at once."""
    sessions = {_hex(member.session_id) for member in members}
    runs = [row for row in reader.rows(RUNS_STATEMENT) if _hex(row[1]) in sessions]
    steps = {_hex(run_id): count for run_id, count in reader.rows(STEPS_STATEMENT)}
    events: dict[str, list[tuple[int, str, str]]] = {}
    for session_id, run_id, seq, kind in reader.rows(EVENTS_STATEMENT):
        if _hex(session_id) in sessions:
            events.setdefault(_hex(session_id), []).append((int(seq), kind, _hex(run_id) if run_id else ""))
    runs_by_session: dict[str, list[tuple[Any, ...]]] = {}
    for run in runs:
        runs_by_session.setdefault(_hex(run[1]), []).append(run)
    now = time.time()
    checks = {
        "posts_failed": sum(1 for member in members if member.post_error),
        "runs_lost": sum(1 for m in members if m.run_id and _hex(m.session_id) not in runs_by_session),
        # Runs beyond the one an accepted post made (a failed post should have made none).
        "runs_duplicated": sum(
            max(0, len(runs_by_session.get(_hex(m.session_id), [])) - (0 if m.post_error else 1))
            for m in members
        ),
        "runs_stuck": sum(1 for run in runs if run[2] not in TERMINAL_RUN_STATUSES),
        "runs_failed": sum(
            1
            for run in runs
            if run[2] in TERMINAL_RUN_STATUSES
            and (run[2], run[3], steps.get(_hex(run[0]), 0)) != ("completed", "end_turn", expected_steps)
        ),
        "runs_completed": sum(1 for run in runs if run[2] == "completed"),
        **_store_checks(events, runs),
        **_stream_checks(members, runs_by_session),
        "first_post_error": next((m.post_error for m in members if m.post_error), ""),
    }
    intervals = [(start, _epoch(run[5]) or now) for run in runs if (start := _epoch(run[4])) is not None]
    return checks, peak_overlap(intervals)


def _store_checks(
    events: dict[str, list[tuple[int, str, str]]], runs: list[tuple[Any, ...]]
) -> dict[str, int]:
    """Each session's stored seqs are 1..k; each terminal run stored exactly one terminal event."""
    gaps = duplicates = 0
    terminal_events: dict[str, int] = {}
    for session_events in events.values():
        seqs = [seq for seq, _, _ in session_events]
        duplicates += len(seqs) - len(set(seqs))
        gaps += max(seqs) - len(set(seqs))
        for _, kind, run_id in session_events:
            if kind in TERMINAL_EVENT_TYPES:
                terminal_events[run_id] = terminal_events.get(run_id, 0) + 1
    wrong_terminal = sum(
        1 for run in runs if run[2] in TERMINAL_RUN_STATUSES and terminal_events.get(_hex(run[0]), 0) != 1
    )
    return {
        "store_seq_gaps": gaps,
        "store_seq_duplicates": duplicates,
        "store_terminal_events_not_one": wrong_terminal,
    }


def _stream_checks(
    members: list[Member], runs_by_session: dict[str, list[tuple[Any, ...]]]
) -> dict[str, int]:
    """What each socket delivered: seqs 1, 2, 3… with no gap or repeat, and one terminal event for
    a run the database holds terminal."""
    gaps = duplicates = wrong_terminal = 0
    for member in members:
        last = 0
        for envelope in member.envelopes:
            seq = int(envelope["seq"])
            if seq <= last:
                duplicates += 1
                continue
            gaps += seq - last - 1
            last = seq
        delivered = sum(1 for envelope in member.envelopes if envelope.get("type") in TERMINAL_EVENT_TYPES)
        stored_terminal = any(
            run[2] in TERMINAL_RUN_STATUSES for run in runs_by_session.get(_hex(member.session_id), [])
        )
        if stored_terminal and delivered != 1:
            wrong_terminal += 1
    return {
        "stream_seq_gaps": gaps,
        "stream_seq_duplicates": duplicates,
        "stream_terminal_events_not_one": wrong_terminal,
    }
