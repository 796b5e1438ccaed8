"""What a user waits for beyond the model: POST a message → the run's terminal state.

The model is the project's fake model server answering instantly, so everything measured is
Agentry: the API request, the transaction, the task broker, the worker's claim, the loop with
its steps, messages and events, and the way the client learns the run ended. Two ways of
learning it are measured: polling ``GET /api/v1/runs/{id}/`` every millisecond, and (when the
server routes ``/ws/sessions/{id}/``) the ``run.completed`` event at a websocket client.

    .venv/bin/python bench/agent_turn.py                       # embedded default: SQLite, ORM broker
    .venv/bin/python bench/agent_turn.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench --redis-url redis://127.0.0.1:6379/3

See bench/README.md for what each number means.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from websockets.exceptions import InvalidHandshake, WebSocketException
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from bench.common import (
    BenchError,
    BenchStack,
    PipedProcess,
    StackOptions,
    cpu_seconds,
    git_commit,
    load_average,
    log,
    machine_busy_seconds,
    median,
    percentile,
    python_loop_ms,
    stop_on_signals,
    tree_cpu_seconds,
)
from tests.fake_model_server import FakeModelServer, Turn

Scenario = Literal["plain", "tool"]
Observer = Literal["poll", "websocket"]
SCENARIOS: tuple[Scenario, ...] = ("plain", "tool")
OBSERVER_LABELS: dict[Observer, str] = {"poll": "GET run, 1 ms poll", "websocket": "websocket run.completed"}
TERMINAL_RUN_STATUSES = frozenset({"completed", "failed", "cancelled", "timeout"})
TERMINAL_EVENT_TYPES = frozenset({"run.completed", "run.failed", "run.cancelled", "run.timeout"})
EXPECTED_STEPS: dict[Scenario, int] = {"plain": 1, "tool": 3}
PLAIN_ANSWER = "Hello! I am a benchmark answer."
TOOL_EXPRESSION = "6 * 7"
TOOL_ANSWER = "6 * 7 = 42."
# Phases of one message on one timeline; they add up to the total (client and server share a clock).
PHASES = ("request", "queue", "setup", "model_calls", "tools", "between_steps", "finish", "observe")


@dataclass
class Sample:
    total_ms: float
    post_ms: float
    # POST → run.started at the websocket client (issue 5's "pickup"); None when polling.
    pickup_ms: float | None
    phases_ms: dict[str, float]


@dataclass
class CpuUse:
    """CPU time per measured message, and how busy the whole machine was meanwhile."""

    server_ms: float
    workers_ms: float
    client_ms: float
    rest_of_machine_ms: float
    machine_busy_percent: float
    load_average: float


class CpuMeter:
    """Snapshots of CPU time: the stack's processes, this process and the fake model's (client and
    fake model), the machine."""

    def __init__(self, stack: BenchStack, model: FakeModelProcess) -> None:
        self.stack = stack
        self.model = model
        self.load_average = load_average()
        self.start = self._snapshot()

    def _snapshot(self) -> tuple[float, float, float, float, float]:
        server, workers = self.stack.cpu_seconds()
        busy, total = machine_busy_seconds()
        client = cpu_seconds(os.getpid()) + tree_cpu_seconds(self.model.pid)
        return server, workers, client, busy, total

    def per_message(self, messages: int) -> CpuUse:
        server, workers, client, busy, total = (
            end - start for end, start in zip(self._snapshot(), self.start, strict=True)
        )
        rest = max(0.0, busy - server - workers - client)
        return CpuUse(
            server_ms=server * 1000 / messages,
            workers_ms=workers * 1000 / messages,
            client_ms=client * 1000 / messages,
            rest_of_machine_ms=rest * 1000 / messages,
            machine_busy_percent=100 * busy / total if total else 0.0,
            load_average=self.load_average,
        )


@dataclass
class ScenarioResult:
    mode: str
    scenario: Scenario
    observer: Observer
    samples: list[Sample]
    server_rss_mb: float
    workers_rss_mb: float
    workers_pss_mb: float
    worker_processes: int
    events_per_run: int
    cpu: CpuUse

    @property
    def totals(self) -> list[float]:
        return [sample.total_ms for sample in self.samples]

    def phase_median(self, phase: str) -> float:
        if phase == "post":
            return median([sample.post_ms for sample in self.samples])
        if phase == "pickup":
            pickups = [sample.pickup_ms for sample in self.samples if sample.pickup_ms is not None]
            return median(pickups) if pickups else float("nan")
        return median([sample.phases_ms[phase] for sample in self.samples])

    def summary(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "scenario": self.scenario,
            "observer": self.observer,
            "n": len(self.samples),
            "median_ms": round(median(self.totals), 2),
            "p95_ms": round(percentile(self.totals, 0.95), 2),
            "min_ms": round(min(self.totals), 2),
            "max_ms": round(max(self.totals), 2),
            "post_response_median_ms": round(self.phase_median("post"), 2),
            "pickup_median_ms": round(self.phase_median("pickup"), 2),
            "phases_median_ms": {phase: round(self.phase_median(phase), 2) for phase in PHASES},
            "events_per_run": self.events_per_run,
            "server_rss_mb": round(self.server_rss_mb, 1),
            "workers_rss_mb": round(self.workers_rss_mb, 1),
            "workers_pss_mb": round(self.workers_pss_mb, 1),
            "worker_processes": self.worker_processes,
            "cpu_ms_per_message": {
                "server": round(self.cpu.server_ms, 2),
                "workers": round(self.cpu.workers_ms, 2),
                "client_and_fake_model": round(self.cpu.client_ms, 2),
                "rest_of_machine": round(self.cpu.rest_of_machine_ms, 2),
            },
            "machine_busy_percent": round(self.cpu.machine_busy_percent, 1),
            "load_average_before": self.cpu.load_average,
            "samples_ms": [round(total, 3) for total in self.totals],
        }


@dataclass
class BenchOptions:
    messages: int
    warmup: int
    poll_interval: float
    run_timeout: float
    one_session: bool
    settle_seconds: float


class WebsocketUnavailable(Exception):
    """The server does not (yet) route ``/ws/sessions/{id}/`` or refuses the bench's key."""


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def phases_of(run: dict[str, Any], *, sent_at: float, observed_at: float) -> dict[str, float]:
    """Where one message's time went, from the run's own timestamps and the client's (epoch seconds)."""
    created, started, finished = (_epoch(run[name]) for name in ("created_at", "started_at", "finished_at"))
    steps = sorted(run["steps"], key=lambda step: step["index"])
    spans = [(_epoch(step["started_at"]), _epoch(step["finished_at"]), step["kind"]) for step in steps]
    gaps = [spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)]
    seconds = {
        "request": created - sent_at,
        "queue": started - created,
        "setup": spans[0][0] - started,
        "model_calls": sum(end - start for start, end, kind in spans if kind == "model_call"),
        "tools": sum(end - start for start, end, kind in spans if kind == "tool_call"),
        "between_steps": sum(gaps),
        "finish": finished - spans[-1][1],
        "observe": observed_at - finished,
    }
    return {phase: value * 1000 for phase, value in seconds.items()}


class AgentTurnBench:
    def __init__(self, stack: BenchStack, model: FakeModelProcess, options: BenchOptions) -> None:
        self.stack = stack
        self.model = model
        self.options = options
        self.client = httpx.Client(
            base_url=stack.base_url,
            headers={"Authorization": f"Bearer {stack.api_key}"},
            timeout=30,
            trust_env=False,
        )
        self.agent_id = ""
        self._tag_counter = 0
        self._shared_session: str | None = None

    def close(self) -> None:
        self.client.close()

    # --- API ------------------------------------------------------------------------------------

    def _json(self, response: httpx.Response, expected_status: int) -> dict[str, Any]:
        if response.status_code != expected_status:
            raise BenchError(
                f"{response.request.method} {response.request.url.path} answered {response.status_code}, "
                f"expected {expected_status}: {response.text[:500]}\n{self.stack.logs()}"
            )
        body: dict[str, Any] = response.json()
        return body

    def create_agent(self) -> None:
        response = self.client.post(
            # Direct: the loop itself is measured, its requests without planning_mode auto's create_plan tool.
            "/api/v1/agents/",
            json={"name": "Bench agent", "model_provider": "anthropic", "planning_mode": "direct"},
        )
        self.agent_id = self._json(response, 201)["id"]

    def new_session(self) -> str:
        response = self.client.post("/api/v1/sessions/", json={"agent": self.agent_id})
        session_id: str = self._json(response, 201)["id"]
        return session_id

    def session_for_message(self) -> str:
        if not self.options.one_session:
            return self.new_session()
        if self._shared_session is None:
            self._shared_session = self.new_session()
        return self._shared_session

    def read_run(self, run_id: str) -> dict[str, Any]:
        return self._json(self.client.get(f"/api/v1/runs/{run_id}/"), 200)

    def count_events(self, run_id: str) -> int:
        return len(self._json(self.client.get(f"/api/v1/runs/{run_id}/events/"), 200)["results"])

    # --- Websocket ------------------------------------------------------------------------------

    def open_websocket(self, session_id: str) -> ClientConnection:
        """Subscribe to the session's events: token in the query string, else as a subprotocol."""
        base = f"{self.stack.websocket_base_url}/ws/sessions/{session_id}/"
        attempts: list[tuple[str, list[Subprotocol] | None]] = [
            (f"{base}?token={self.stack.api_key}", None),
            (base, [Subprotocol("bearer"), Subprotocol(self.stack.api_key)]),
        ]
        reasons = []
        for url, subprotocols in attempts:
            try:
                return connect(url, subprotocols=subprotocols, proxy=None, open_timeout=5, compression=None)
            except (InvalidHandshake, WebSocketException, OSError, TimeoutError) as error:
                reasons.append(f"{type(error).__name__}: {error}")
        raise WebsocketUnavailable("; ".join(reasons))

    def websocket_is_available(self) -> tuple[bool, str]:
        try:
            with self.open_websocket(self.new_session()):
                return True, ""
        except WebsocketUnavailable as error:
            return False, str(error)

    # --- One message ----------------------------------------------------------------------------

    def _content_for(self, scenario: Scenario) -> str:
        """A unique tag lets the fake model give this message (and only it) its scripted turns."""
        self._tag_counter += 1
        tag = f"[bench-{scenario}-{self._tag_counter:06d}]"
        if scenario == "tool":
            self.model.script(
                Turn(tool_calls=[("calculator", {"expression": TOOL_EXPRESSION})]),
                Turn(text=TOOL_ANSWER),
                match=tag,
            )
            return f"{tag} What is {TOOL_EXPRESSION}? Use the calculator."
        return f"{tag} Say hello."

    def _wait_by_polling(self, run_id: str, deadline: float) -> None:
        while True:
            status = self._json(self.client.get(f"/api/v1/runs/{run_id}/"), 200)["status"]
            if status in TERMINAL_RUN_STATUSES:
                return
            if time.perf_counter() > deadline:
                raise BenchError(
                    f"run {run_id} still {status} after {self.options.run_timeout}s\n{self.stack.logs()}"
                )
            time.sleep(self.options.poll_interval)

    def _wait_by_websocket(
        self, websocket: ClientConnection, run_id: str, started: float, deadline: float
    ) -> float | None:
        """Wait for the run's terminal event; returns the seconds from the POST to ``run.started``."""
        pickup_seconds: float | None = None
        while True:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise BenchError(
                    f"no terminal event for run {run_id} within {self.options.run_timeout}s\n"
                    f"{self.stack.logs()}"
                )
            try:
                raw = websocket.recv(timeout=remaining)
            except TimeoutError:
                continue
            envelope = json.loads(raw)
            if not isinstance(envelope, dict) or envelope.get("run_id") != run_id:
                continue
            if envelope.get("type") == "run.started" and pickup_seconds is None:
                pickup_seconds = time.perf_counter() - started
            if envelope.get("type") in TERMINAL_EVENT_TYPES:
                return pickup_seconds

    def measure_message(self, scenario: Scenario, observer: Observer) -> tuple[Sample, str]:
        session_id = self.session_for_message()
        content = self._content_for(scenario)
        with ExitStack() as cleanup:
            websocket = None
            if observer == "websocket":
                websocket = cleanup.enter_context(self.open_websocket(session_id))
                time.sleep(self.options.settle_seconds)
            sent_at = time.time()
            started = time.perf_counter()
            response = self.client.post(f"/api/v1/sessions/{session_id}/messages/", json={"content": content})
            post_seconds = time.perf_counter() - started
            run_id: str = self._json(response, 202)["run"]["id"]
            deadline = started + self.options.run_timeout
            pickup_seconds = None
            if websocket is None:
                self._wait_by_polling(run_id, deadline)
            else:
                pickup_seconds = self._wait_by_websocket(websocket, run_id, started, deadline)
            total_seconds = time.perf_counter() - started
        run = self.read_run(run_id)
        self._check_run(run, scenario)
        phases = phases_of(run, sent_at=sent_at, observed_at=sent_at + total_seconds)
        pickup_ms = pickup_seconds * 1000 if pickup_seconds is not None else None
        sample = Sample(
            total_ms=total_seconds * 1000, post_ms=post_seconds * 1000, pickup_ms=pickup_ms, phases_ms=phases
        )
        return sample, run_id

    def _check_run(self, run: dict[str, Any], scenario: Scenario) -> None:
        """Only a real, complete turn counts: the right end, the right number of steps."""
        outcome = (run["status"], run["stop_reason"], len(run["steps"]))
        if outcome != ("completed", "end_turn", EXPECTED_STEPS[scenario]):
            raise BenchError(
                f"run {run['id']} ended {outcome}, expected completed/end_turn with "
                f"{EXPECTED_STEPS[scenario]} steps; error: {run.get('error')!r}\n{self.stack.logs()}"
            )

    # --- Scenarios ------------------------------------------------------------------------------

    def run_scenario(self, scenario: Scenario, observer: Observer) -> ScenarioResult:
        label = f"{scenario} / {OBSERVER_LABELS[observer]}"
        for _ in range(self.options.warmup):
            self.measure_message(scenario, observer)
        samples, last_run_id = [], ""
        meter = CpuMeter(self.stack, self.model)
        for index in range(self.options.messages):
            self.stack.check_alive()
            sample, last_run_id = self.measure_message(scenario, observer)
            samples.append(sample)
            if (index + 1) % 25 == 0:
                log(f"bench: {label}: {index + 1}/{self.options.messages}")
        cpu = meter.per_message(len(samples))
        server, workers = self.stack.memory()
        return ScenarioResult(
            mode=self.stack.mode,
            scenario=scenario,
            observer=observer,
            samples=samples,
            server_rss_mb=server.rss_mb,
            workers_rss_mb=workers.rss_mb,
            workers_pss_mb=workers.pss_mb,
            worker_processes=workers.process_count,
            events_per_run=self.count_events(last_run_id),
            cpu=cpu,
        )


# --- Output ---------------------------------------------------------------------------------------


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_report(report: dict[str, Any], results: list[ScenarioResult]) -> str:
    lines = [
        f"Agent turn, {report['mode']}: commit {report['commit']}, {report['cpus']} CPUs, "
        f"Q_WORKERS={report['settings']['Q_WORKERS']}, fake model answering instantly, "
        f"{'one session' if report['one_session'] else 'a new session per message'}, "
        f"{report['warmup']} warm-up messages per scenario not counted. Machine yardstick: a "
        f"1-million-step Python loop takes {report['python_loop_ms']:.1f} ms (median of 5, before the"
        " start).",
        "",
        _row(
            ["mode", "scenario", "observed at", "n", "median ms", "p95 ms", "server RSS MB", "workers RSS MB"]
        ),
        _row(["---", "---", "---", "---:", "---:", "---:", "---:", "---:"]),
    ]
    for result in results:
        summary = result.summary()
        lines.append(
            _row(
                [
                    result.mode,
                    result.scenario,
                    OBSERVER_LABELS[result.observer],
                    str(summary["n"]),
                    f"{summary['median_ms']:.1f}",
                    f"{summary['p95_ms']:.1f}",
                    f"{summary['server_rss_mb']:.0f}",
                    f"{summary['workers_rss_mb']:.0f}",
                ]
            )
        )
    if results:
        last = results[-1].summary()
        lines += [
            "",
            f"Workers: {last['worker_processes']} processes in the qcluster tree; RSS counts pages shared "
            f"between forked workers once per process; their PSS, {last['workers_pss_mb']:.0f} MB, "
            "shares them fairly.",
        ]
    if not report["websocket"]["available"]:
        lines += ["", f"Websocket not measured: {report['websocket']['reason'][:300]}"]
    lines += ["", "Where the time goes (medians, ms; the phases add up to the total):", ""]
    headers = ["scenario", "observed at", *PHASES, "POST response", "run.started at client", "events/run"]
    lines += [_row(headers), _row(["---", "---", *["---:"] * (len(headers) - 2)])]
    for result in results:
        lines.append(
            _row(
                [
                    result.scenario,
                    OBSERVER_LABELS[result.observer],
                    *[f"{result.phase_median(phase):.1f}" for phase in PHASES],
                    f"{result.phase_median('post'):.1f}",
                    "n/a" if result.observer == "poll" else f"{result.phase_median('pickup'):.1f}",
                    str(result.events_per_run),
                ]
            )
        )
    lines += [
        "",
        "CPU per message (ms; the rest of the machine includes PostgreSQL, Redis and anything else running):",
        "",
    ]
    headers = ["scenario", "observed at", "server", "workers", "client + fake model", "rest of machine",
               "machine busy %", "load avg before"]  # fmt: skip
    lines += [_row(headers), _row(["---", "---", *["---:"] * (len(headers) - 2)])]
    for result in results:
        cpu = result.cpu
        lines.append(
            _row(
                [
                    result.scenario,
                    OBSERVER_LABELS[result.observer],
                    f"{cpu.server_ms:.1f}",
                    f"{cpu.workers_ms:.1f}",
                    f"{cpu.client_ms:.1f}",
                    f"{cpu.rest_of_machine_ms:.1f}",
                    f"{cpu.machine_busy_percent:.0f}",
                    f"{cpu.load_average:.2f}",
                ]
            )
        )
    return "\n".join(lines)


# --- Main -----------------------------------------------------------------------------------------


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--messages", type=int, default=50, help="measured messages per scenario (default 50)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="messages per scenario not counted (default 5)")
    parser.add_argument("--database-url", help="a PostgreSQL URL whose database the bench creates and drops")
    parser.add_argument("--redis-url", help="Redis for the broker, cache and channel layer")
    parser.add_argument("--scenarios", default="plain,tool", help="comma-separated: plain,tool")
    parser.add_argument(
        "--observers",
        default="poll,websocket",
        help="comma-separated: poll,websocket (websocket only when the server routes it)",
    )
    parser.add_argument("--poll-interval", type=float, default=0.001, help="seconds between run reads")
    parser.add_argument("--run-timeout", type=float, default=60.0, help="longest wait for one run, seconds")
    parser.add_argument(
        "--one-session",
        action="store_true",
        help="post every message to one session (default: a new session per message)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server and workers, e.g. Q_WORKERS=4",
    )
    parser.add_argument(
        "--settle-ms",
        type=float,
        default=50.0,
        help="pause between opening the websocket and posting (default 50): a page's socket is"
        " subscribed long before its user sends, so its set-up is not part of the wait",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory with the logs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown tables")
    parser.add_argument(
        "--drive",
        action="store_true",
        help="measure one websocket message per scenario name read from stdin (bench/compare.py)",
    )
    arguments = parser.parse_args(argv)
    if arguments.messages < 1 or arguments.warmup < 0:
        parser.error("--messages must be at least 1 and --warmup at least 0")
    unknown = (set(arguments.scenarios.split(",")) - set(SCENARIOS)) | (
        set(arguments.observers.split(",")) - set(OBSERVER_LABELS)
    )
    if unknown:
        parser.error(f"unknown scenarios or observers: {', '.join(sorted(unknown))}")
    if bool(arguments.database_url) and arguments.database_url.startswith("sqlite:"):
        parser.error("--database-url takes PostgreSQL; the embedded default makes its own SQLite file")
    return arguments


def extra_environment(assignments: list[str]) -> dict[str, str]:
    environment = {}
    for assignment in assignments:
        name, separator, value = assignment.partition("=")
        if not separator or not name:
            raise SystemExit(f"--set takes NAME=VALUE, got {assignment!r}")
        environment[name] = value
    return environment


class FakeModelProcess:
    """The fake model server in a process of its own, as a real model API is on other machines.

    In the bench's own process, its request handling competed for one interpreter lock with
    the websocket client reading the same run's events, and that wait counted as Agentry's.
    """

    def __init__(self) -> None:
        self._process = PipedProcess("fake model server", _serve_fake_model)
        self.url: str = self._process.ready
        self.pid = self._process.pid

    def script(self, *turns: Turn, match: str) -> None:
        """Queue turns for the requests containing ``match``; returns once the server has them."""
        self._process.commands.send((turns, match))
        self._process.commands.recv()

    def close(self) -> None:
        self._process.close()


def _serve_fake_model(commands: Connection) -> None:
    server = FakeModelServer(record_requests=False)
    server.set_default(Turn(text=PLAIN_ANSWER))
    with server:
        commands.send(server.url)
        while (command := commands.recv()) is not None:
            turns, match = command
            server.script(*turns, match=match)
            commands.send(True)


@contextmanager
def fake_model() -> Iterator[FakeModelProcess]:
    server = FakeModelProcess()
    try:
        yield server
    finally:
        server.close()


def serve_commands(bench: AgentTurnBench, scenarios: list[Scenario], *, warmup: int) -> None:
    """``--drive``: after the warm-up, one message per scenario name read from stdin, each
    answered on stdout with one JSON line (``total_ms``, ``pickup_ms``); stops at the input's end.
    For bench/compare.py, which alternates two checkouts message by message."""
    for scenario in scenarios:
        for _ in range(warmup):
            bench.measure_message(scenario, "websocket")
    print(json.dumps({"ready": True}), flush=True)
    by_name: dict[str, Scenario] = {name: name for name in SCENARIOS}
    for line in sys.stdin:
        if line.strip() not in by_name:
            raise BenchError(f"unknown scenario {line.strip()!r} on stdin")
        sample, _run_id = bench.measure_message(by_name[line.strip()], "websocket")
        print(json.dumps({"total_ms": sample.total_ms, "pickup_ms": sample.pickup_ms}), flush=True)


def run_bench(arguments: argparse.Namespace) -> tuple[dict[str, Any], list[ScenarioResult]]:
    scenarios: list[Scenario] = [name for name in SCENARIOS if name in arguments.scenarios.split(",")]
    observers: list[Observer] = [
        name for name in ("poll", "websocket") if name in arguments.observers.split(",")
    ]
    options = BenchOptions(
        messages=arguments.messages,
        warmup=arguments.warmup,
        poll_interval=arguments.poll_interval,
        run_timeout=arguments.run_timeout,
        one_session=arguments.one_session,
        settle_seconds=arguments.settle_ms / 1000,
    )
    environment = extra_environment(arguments.set)
    yardstick_ms = python_loop_ms()
    with fake_model() as model:
        stack_options = StackOptions(
            database_url=arguments.database_url,
            redis_url=arguments.redis_url,
            model_base_url=model.url,
            extra_environment=environment,
            keep_directory=arguments.keep,
        )
        with BenchStack(stack_options) as stack:
            bench = AgentTurnBench(stack, model, options)
            try:
                bench.create_agent()
                bench.measure_message("plain", "poll")  # the first run waits for the cluster to come up
                # The worker's django-q2 cluster keeps starting after the first run: measured CPU
                # would include its start-up.
                stack.wait_until_idle()
                is_websocket_available, reason = bench.websocket_is_available()
                if arguments.drive:
                    if not is_websocket_available:
                        raise BenchError(f"--drive measures at a websocket: {reason}")
                    serve_commands(bench, scenarios, warmup=options.warmup)
                    return {}, []
                if "websocket" in observers and not is_websocket_available:
                    observers.remove("websocket")
                results = [
                    bench.run_scenario(scenario, observer) for scenario in scenarios for observer in observers
                ]
            finally:
                bench.close()
            report: dict[str, Any] = {
                "benchmark": "agent_turn",
                "commit": git_commit(),
                "mode": stack.mode,
                "cpus": os.cpu_count(),
                "python_loop_ms": round(yardstick_ms, 1),
                "one_session": options.one_session,
                "warmup": options.warmup,
                "poll_interval_seconds": options.poll_interval,
                "settings": {
                    "Q_WORKERS": environment.get("Q_WORKERS", os.environ.get("Q_WORKERS", "2 (default)")),
                    **{name: value for name, value in environment.items() if name != "Q_WORKERS"},
                },
                "websocket": {"available": is_websocket_available, "reason": reason},
            }
    report["results"] = [result.summary() for result in results]
    return report, results


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    try:
        with stop_on_signals():
            report, results = run_bench(arguments)
    except BenchError as error:
        log(f"bench failed: {error}")
        return 1
    except KeyboardInterrupt:
        log("bench interrupted; processes stopped and files removed")
        return 130
    if not arguments.drive:
        print(json.dumps(report, indent=2) if arguments.json else markdown_report(report, results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
