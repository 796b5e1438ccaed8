"""Many users at once: N sessions each post one message at the same moment, against a slow model.

The fake model server answers every model call after a fixed delay (2 s before its first byte,
as a real model's time to first token), in its own process. For each scenario (``plain``: one
model call; ``tool``: the model asks for ``calculator``, then answers) and each N, a fresh stack
(one uvicorn, one ``manage.py worker``) gets N sessions, each watched by a websocket, then N
concurrent POSTs released together from a process of their own (bench.burst_posts); the burst
ends when every socket has seen its run end.

    .venv/bin/python bench/concurrency.py                       # embedded default: SQLite, N = 10, 20
    .venv/bin/python bench/concurrency.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench_conc --redis-url redis://127.0.0.1:6379/9

See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, WebSocketException

from bench.agent_turn import FakeModelProcess, extra_environment, fake_model
from bench.burst_posts import Post, PostingProcess, PostOutcome, PostTarget
from bench.burst_readings import (
    TERMINAL_EVENT_TYPES,
    TERMINAL_RUN_STATUSES,
    CpuReading,
    DatabaseReader,
    Member,
    PostgresConnectionSampler,
    burst_phases,
    check_burst,
    cpu_per_run,
    read_cpu,
)
from bench.common import (
    BenchError,
    BenchStack,
    MemorySample,
    PostgresBenchDatabase,
    StackOptions,
    git_commit,
    load_average,
    log,
    percentile,
    python_loop_ms,
    stop_on_signals,
)
from bench.concurrency_report import makespan_text, markdown_report
from tests.fake_model_server import Turn

Scenario = Literal["plain", "tool"]
SCENARIOS: tuple[Scenario, ...] = ("plain", "tool")
PRODUCTION_SIZES = (10, 50, 100, 200)
EMBEDDED_SIZES = (10, 20)
EXPECTED_STEPS: dict[Scenario, int] = {"plain": 1, "tool": 3}
PLAIN_ANSWER = "Hello! I am a benchmark answer."
TOOL_EXPRESSION = "6 * 7"
TOOL_ANSWER = "6 * 7 = 42."
# Every message of a burst is accepted while the quota checks still run: the per-member limit of
# active runs (default 3) raised far above N, as an operator would for such a tenant
# (Tenant.settings; messages_per_minute_per_user is raised by bench.common for every bench).
CONCURRENCY_TENANT_LIMITS = {"active_runs_per_user": 1_000_000}
# Sessions created and sockets opened this many at a time before the burst (not timed).
SETUP_CONCURRENCY = 20
# A run terminal in the database whose socket never said so is waited for this long, then counted.
STREAM_GRACE_SECONDS = 10.0
DATABASE_LOCKED = "database is locked"
TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Observed:
    """Readings taken around one burst's posts and wait, before its sockets close."""

    started: float
    ended: float
    load_average_before: float
    cpu_before: CpuReading
    cpu_after: CpuReading
    server_memory: MemorySample
    workers_memory: MemorySample
    connections: dict[str, int | None]


@dataclass
class BurstResult:
    mode: str
    scenario: Scenario
    size: int
    timeout_seconds: float
    # None when the burst timed out before every accepted run ended.
    makespan_seconds: float | None
    runs_accepted: int
    post_to_completed_seconds: list[float]
    post_seconds: list[float]
    peak_running: int
    # Where the burst's time went: see ``burst_phases``.
    phases: dict[str, float | None]
    memory_mb: dict[str, float]
    worker_processes: int
    connections: dict[str, int | None]
    cpu_seconds_per_run: dict[str, float | None]
    machine_busy_percent: float
    load_average_before: float
    checks: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        done = self.post_to_completed_seconds
        return {
            "mode": self.mode,
            "scenario": self.scenario,
            "n": self.size,
            "makespan_seconds": None if self.makespan_seconds is None else round(self.makespan_seconds, 3),
            "timeout_seconds": self.timeout_seconds,
            "runs_accepted": self.runs_accepted,
            "runs_observed_done": len(done),
            "post_to_completed_p50_seconds": _censored_percentile(done, self.runs_accepted, 0.5),
            "post_to_completed_p95_seconds": _censored_percentile(done, self.runs_accepted, 0.95),
            "peak_runs_at_once": self.peak_running,
            "phases_seconds": self.phases,
            "post_p50_ms": round(percentile(self.post_seconds, 0.5) * 1000, 1),
            "post_p95_ms": round(percentile(self.post_seconds, 0.95) * 1000, 1),
            "post_max_ms": round(max(self.post_seconds, default=float("nan")) * 1000, 1),
            "memory_mb": {name: round(value, 1) for name, value in self.memory_mb.items()},
            "worker_processes": self.worker_processes,
            "postgres_connections": self.connections,
            "cpu_seconds_per_run": {
                name: None if value is None else round(value, 4)
                for name, value in self.cpu_seconds_per_run.items()
            },
            "machine_busy_percent": round(self.machine_busy_percent, 1),
            "load_average_before": self.load_average_before,
            "checks": self.checks,
        }


def _censored_percentile(done: list[float], total: int, fraction: float) -> float | None:
    """The percentile over ``total`` runs of which only ``done`` ended in time (interpolated as
    ``percentile`` does); None when it falls among the others, that is above the timeout."""
    ordered = sorted(done)
    position = (total - 1) * fraction
    lower, upper = math.floor(position), math.ceil(position)
    if not ordered or upper >= len(ordered):
        return None
    return round(ordered[lower] + (ordered[upper] - ordered[lower]) * (position - lower), 3)


# --- One burst ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BurstPlan:
    scenario: Scenario
    size: int
    warmup: int
    model_delay: float
    timeout: float
    settle_seconds: float


class Burst:
    """A fresh stack's one burst: warm-up, N sessions and sockets, N posts at once, then the checks."""

    def __init__(
        self, stack: BenchStack, model: FakeModelProcess, plan: BurstPlan, tags: Iterator[int]
    ) -> None:
        self.stack = stack
        self.model = model
        self.plan = plan
        self._tags = tags
        self._headers = {"Authorization": f"Bearer {stack.api_key}"}
        self._remaining = 0
        self._all_done = asyncio.Event()

    def _client(self) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        return httpx.AsyncClient(
            base_url=self.stack.base_url,
            headers=self._headers,
            timeout=self.plan.timeout,
            limits=limits,
            trust_env=False,
        )

    async def _json(self, response: httpx.Response, expected_status: int) -> dict[str, Any]:
        if response.status_code != expected_status:
            raise BenchError(
                f"{response.request.method} {response.request.url.path} answered {response.status_code}, "
                f"expected {expected_status}: {response.text[:500]}\n{self.stack.logs()}"
            )
        body: dict[str, Any] = response.json()
        return body

    def _content(self, *, delay: float) -> str:
        """A unique tag gives this message (and only it) its scripted model turns."""
        tag = f"[bench-concurrency-{next(self._tags):06d}]"
        if self.plan.scenario == "tool":
            self.model.script(
                Turn(tool_calls=[("calculator", {"expression": TOOL_EXPRESSION})], response_delay=delay),
                Turn(text=TOOL_ANSWER, response_delay=delay),
                match=tag,
            )
            return f"{tag} What is {TOOL_EXPRESSION}? Use the calculator."
        self.model.script(Turn(text=PLAIN_ANSWER, response_delay=delay), match=tag)
        return f"{tag} Say hello."

    async def _sessions(self, client: httpx.AsyncClient, agent_id: str, count: int) -> list[str]:
        gate = asyncio.Semaphore(SETUP_CONCURRENCY)

        async def create() -> str:
            async with gate:
                response = await client.post("/api/v1/sessions/", json={"agent": agent_id})
            session_id: str = (await self._json(response, 201))["id"]
            return session_id

        return list(await asyncio.gather(*(create() for _ in range(count))))

    async def _warm_up(self, client: httpx.AsyncClient, agent_id: str) -> None:
        """Runs with an instant model, at once, not counted: the first run waits for the cluster."""
        sessions = await self._sessions(client, agent_id, self.plan.warmup)
        posts = [
            client.post(f"/api/v1/sessions/{session}/messages/", json={"content": self._content(delay=0.0)})
            for session in sessions
        ]
        run_ids = [
            (await self._json(response, 202))["run"]["id"] for response in await asyncio.gather(*posts)
        ]
        deadline = time.perf_counter() + self.plan.timeout
        for run_id in run_ids:
            while (run := await self._json(await client.get(f"/api/v1/runs/{run_id}/"), 200))[
                "status"
            ] not in TERMINAL_RUN_STATUSES:
                if time.perf_counter() > deadline:
                    raise BenchError(f"warm-up run {run_id} did not end\n{self.stack.logs()}")
                await asyncio.sleep(0.05)
            if run["status"] != "completed":
                raise BenchError(f"warm-up run {run_id} ended {run['status']}: {run.get('error')!r}")

    async def _watch(self, member: Member) -> None:
        base = f"{self.stack.websocket_base_url}/ws/sessions/{member.session_id}/"
        url = f"{base}?token={self.stack.api_key}&after=0"
        try:
            member.websocket = await connect(
                url, proxy=None, open_timeout=30, compression=None, ping_interval=None, max_queue=None
            )
        except (InvalidHandshake, WebSocketException, OSError, TimeoutError) as error:
            raise BenchError(f"websocket to {member.session_id}: {type(error).__name__}: {error}") from error
        member.reader = asyncio.create_task(self._read(member))

    async def _read(self, member: Member) -> None:
        assert member.websocket is not None
        with contextlib.suppress(ConnectionClosed):
            async for raw in member.websocket:
                envelope = json.loads(raw)
                if not isinstance(envelope, dict) or "seq" not in envelope:
                    continue  # a heartbeat
                member.envelopes.append(envelope)
                if envelope.get("type") == "run.started" and member.started_at is None:
                    member.started_at = time.perf_counter()
                if envelope.get("type") in TERMINAL_EVENT_TYPES and member.terminal_at is None:
                    member.terminal_at = time.perf_counter()
                    self._settle(member)

    def _settle(self, member: Member) -> None:
        if member.is_settled:
            return
        member.is_settled = True
        self._remaining -= 1
        if self._remaining <= 0:
            self._all_done.set()

    def _take_outcome(self, member: Member, outcome: PostOutcome) -> None:
        member.post_started = outcome.started
        member.post_seconds = outcome.seconds
        member.run_id = outcome.run_id
        member.post_error = outcome.error
        if member.post_error:
            self._settle(member)  # no run to wait for

    async def _wait(self, reader: DatabaseReader, started: float) -> None:
        """Until every socket has seen its run end, the database has held every run terminal for the
        grace period, or the timeout."""
        deadline = started + self.plan.timeout
        all_terminal_since: float | None = None
        while not self._all_done.is_set():
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                log(f"bench: burst timed out after {self.plan.timeout:g} s, {self._remaining} runs not done")
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._all_done.wait(), timeout=min(2.0, remaining))
            self.stack.check_alive()
            if self._all_done.is_set():
                return
            if await asyncio.to_thread(reader.unfinished_runs) > 0:
                all_terminal_since = None
            elif all_terminal_since is None:
                all_terminal_since = time.perf_counter()
            elif time.perf_counter() - all_terminal_since > STREAM_GRACE_SECONDS:
                log("bench: every run is terminal but some sockets never said so")
                return

    async def measure(self) -> BurstResult:
        reader = DatabaseReader(self.stack)
        members: list[Member] = []
        try:
            members = await self._prepare()
            observed = await self._release(members, reader)
        finally:
            await self._close_sockets(members)
        try:
            logs = {
                "database_locked_in_logs": self.stack.count_in_logs(DATABASE_LOCKED),
                "tracebacks_in_logs": self.stack.count_in_logs(TRACEBACK),
            }
            checks, peak_running = await asyncio.to_thread(
                check_burst, reader, members, expected_steps=EXPECTED_STEPS[self.plan.scenario]
            )
            checks.update(logs)
        finally:
            reader.close()
        return self._result(members, observed, checks, peak_running)

    async def _prepare(self) -> list[Member]:
        """The agent, the warm-up, then N sessions with their scripted model turns and open sockets."""
        async with self._client() as client:
            agent = await client.post(
                "/api/v1/agents/",
                json={"name": "Bench agent", "model_provider": "anthropic", "planning_mode": "direct"},
            )
            agent_id = (await self._json(agent, 201))["id"]
            await self._warm_up(client, agent_id)
            # Before the sockets open: embedded, each open socket polls the store.
            await asyncio.to_thread(self.stack.wait_until_idle)
            sessions = await self._sessions(client, agent_id, self.plan.size)
        members = [Member(session, self._content(delay=self.plan.model_delay)) for session in sessions]
        gate = asyncio.Semaphore(SETUP_CONCURRENCY)

        async def watch(member: Member) -> None:
            async with gate:
                await self._watch(member)

        await asyncio.gather(*(watch(member) for member in members))
        await asyncio.sleep(self.plan.settle_seconds)
        return members

    async def _release(self, members: list[Member], reader: DatabaseReader) -> Observed:
        """All posts at once, then the wait for every run's end, with the readings around it."""
        sampler = (
            PostgresConnectionSampler(self.stack.database)
            if isinstance(self.stack.database, PostgresBenchDatabase)
            else None
        )
        self._remaining = len(members)
        target = PostTarget(self.stack.base_url, self.stack.api_key, self.plan.timeout)
        poster = await asyncio.to_thread(
            PostingProcess, target, [Post(member.session_id, member.content) for member in members]
        )
        try:
            idle_connections = await sampler.now() if sampler is not None else None
            load_before = load_average()
            cpu_before = read_cpu(self.stack, fake_model_pid=self.model.pid, posting_pid=poster.pid)
            log(f"bench: {self.plan.scenario} x {self.plan.size}: posting")
            if sampler is not None:
                await sampler.start()
            started = time.perf_counter()
            for member, outcome in zip(members, await poster.release(), strict=True):
                self._take_outcome(member, outcome)
            await self._wait(reader, started)
            ended = time.perf_counter()
            cpu_after = read_cpu(self.stack, fake_model_pid=self.model.pid, posting_pid=poster.pid)
            server_memory, workers_memory = self.stack.memory()
        finally:
            if sampler is not None:
                await sampler.stop()
            poster.close()
        return Observed(
            started=started,
            ended=ended,
            load_average_before=load_before,
            cpu_before=cpu_before,
            cpu_after=cpu_after,
            server_memory=server_memory,
            workers_memory=workers_memory,
            connections={"idle_before": idle_connections, "peak": sampler.peak if sampler else None},
        )

    def _result(
        self, members: list[Member], observed: Observed, checks: dict[str, Any], peak_running: int
    ) -> BurstResult:
        accepted = [member for member in members if not member.post_error]
        done = [member for member in accepted if member.terminal_at is not None]
        last_end = max((member.terminal_at or 0.0 for member in done), default=observed.ended)
        server, workers = observed.server_memory, observed.workers_memory
        before, after = observed.cpu_before, observed.cpu_after
        return BurstResult(
            mode=self.stack.mode,
            scenario=self.plan.scenario,
            size=self.plan.size,
            timeout_seconds=self.plan.timeout,
            makespan_seconds=last_end - observed.started if len(done) == len(accepted) else None,
            runs_accepted=len(accepted),
            post_to_completed_seconds=[(member.terminal_at or 0.0) - member.post_started for member in done],
            post_seconds=[member.post_seconds for member in members if member.post_seconds is not None],
            peak_running=peak_running,
            phases=burst_phases(members, observed.started),
            memory_mb={
                "server_rss": server.rss_mb,
                "server_pss": server.pss_mb,
                "workers_rss": workers.rss_mb,
                "workers_pss": workers.pss_mb,
                "total_rss": server.rss_mb + workers.rss_mb,
                "total_pss": server.pss_mb + workers.pss_mb,
            },
            worker_processes=workers.process_count,
            connections=observed.connections,
            cpu_seconds_per_run=cpu_per_run(before, after, runs=self.plan.size),
            machine_busy_percent=100 * (after.busy - before.busy) / (after.total - before.total),
            load_average_before=observed.load_average_before,
            checks={**checks, "wall_seconds": round(observed.ended - observed.started, 3)},
        )

    async def _close_sockets(self, members: list[Member]) -> None:
        async def close(member: Member) -> None:
            if member.websocket is not None:
                with contextlib.suppress(ConnectionClosed, OSError, TimeoutError):
                    await asyncio.wait_for(member.websocket.close(), timeout=5)
            if member.reader is not None:
                member.reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await member.reader

        await asyncio.gather(*(close(member) for member in members))


# --- Main -----------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", help="a PostgreSQL URL whose database the bench creates and drops")
    parser.add_argument("--redis-url", help="Redis for the broker, cache and channel layer")
    parser.add_argument(
        "--sizes", help="comma-separated N (default 10,50,100,200 with --database-url, else 10,20)"
    )
    parser.add_argument("--scenarios", default="plain,tool", help="comma-separated: plain,tool")
    parser.add_argument("--model-delay", type=float, default=2.0, help="seconds before each model answer (2)")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="longest wait for one burst, seconds (180)"
    )
    parser.add_argument(
        "--warmup", type=int, default=4, help="runs at once before each burst, not counted (4)"
    )
    parser.add_argument(
        "--settle-ms", type=float, default=500.0, help="pause between opening the sockets and posting (500)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE",
        help="an environment variable for the server and worker, e.g. RUN_CONCURRENCY=64",
    )  # fmt: skip
    parser.add_argument(
        "--rounds", type=int, default=1,
        help="how many times each burst runs, the rounds one after another; medians reported (1)",
    )  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories with the logs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown tables")
    arguments = parser.parse_args(argv)
    unknown = set(arguments.scenarios.split(",")) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")
    if arguments.database_url and arguments.database_url.startswith("sqlite:"):
        parser.error("--database-url takes PostgreSQL; the embedded default makes its own SQLite file")
    default_sizes = PRODUCTION_SIZES if arguments.database_url else EMBEDDED_SIZES
    try:
        arguments.sizes = (
            [int(size) for size in arguments.sizes.split(",")] if arguments.sizes else list(default_sizes)
        )
    except ValueError:
        parser.error("--sizes takes comma-separated whole numbers")
    if min(arguments.sizes) < 1 or arguments.warmup < 0 or arguments.timeout <= 0 or arguments.rounds < 1:
        parser.error("sizes and --rounds must be at least 1, --warmup at least 0 and --timeout positive")
    return arguments


def run_bench(arguments: argparse.Namespace) -> dict[str, Any]:
    scenarios: list[Scenario] = [name for name in SCENARIOS if name in arguments.scenarios.split(",")]
    environment = extra_environment(arguments.set)
    yardstick_ms = python_loop_ms()
    tags = itertools.count(1)
    results: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    mode = ""
    # Whole rounds one after another, not each burst K times in a row: the VM's speed drifts
    # over minutes, and each round's bursts see the same part of it.
    bursts = [
        (round_number, scenario, size)
        for round_number in range(1, arguments.rounds + 1)
        for scenario in scenarios
        for size in arguments.sizes
    ]

    def round_of(round_number: int) -> dict[str, int]:
        """Which round a burst was in, said only when there are several."""
        return {"round": round_number} if arguments.rounds > 1 else {}

    with fake_model() as model:
        for round_number, scenario, size in bursts:
            options = StackOptions(
                database_url=arguments.database_url,
                redis_url=arguments.redis_url,
                model_base_url=model.url,
                extra_environment=environment,
                keep_directory=arguments.keep,
                worker_command="worker",
                tenant_limits=CONCURRENCY_TENANT_LIMITS,
            )
            plan = BurstPlan(
                scenario=scenario,
                size=size,
                warmup=arguments.warmup,
                model_delay=arguments.model_delay,
                timeout=arguments.timeout,
                settle_seconds=arguments.settle_ms / 1000,
            )
            try:
                with BenchStack(options) as stack:
                    mode = stack.mode
                    result = asyncio.run(Burst(stack, model, plan, tags).measure())
            except BenchError as error:  # the next burst gets a fresh stack
                log(f"bench: {scenario} x {size} failed: {error}")
                failures.append(
                    {"scenario": scenario, "n": size, **round_of(round_number), "error": str(error)}
                )
                continue
            summary = {**result.summary(), **round_of(round_number)}
            log(f"bench: {scenario} x {size}: makespan {makespan_text(summary)} s")
            results.append(summary)
    return {
        "benchmark": "concurrency",
        "commit": git_commit(),
        "mode": mode,
        "cpus": os.cpu_count(),
        "python_loop_ms": round(yardstick_ms, 1),
        "model_delay_seconds": arguments.model_delay,
        "timeout_seconds": arguments.timeout,
        "warmup": arguments.warmup,
        "rounds": arguments.rounds,
        "tenant_limits": CONCURRENCY_TENANT_LIMITS,
        "settings": {
            "RUN_CONCURRENCY": environment.get(
                "RUN_CONCURRENCY", os.environ.get("RUN_CONCURRENCY", "default")
            ),
            **{name: value for name, value in environment.items() if name != "RUN_CONCURRENCY"},
        },
        "results": results,
        "failed_bursts": failures,
    }


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    try:
        with stop_on_signals():
            report = run_bench(arguments)
    except BenchError as error:
        log(f"bench failed: {error}")
        return 1
    except KeyboardInterrupt:
        log("bench interrupted; processes stopped and files removed")
        return 130
    print(json.dumps(report, indent=2) if arguments.json else markdown_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
