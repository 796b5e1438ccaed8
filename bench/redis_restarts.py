"""API requests through Redis restarts: what each request answers before, during and after an outage.

    .venv/bin/python bench/redis_restarts.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench_restarts

Starts a redis-server of its own (``tests/redis_server.py``: a free port, nothing on disk) and a
``BenchStack`` on it (uvicorn and a django-q2 cluster, configured like production). A baseline
burst of ``--requests`` GET /api/v1/sessions/ at ``--concurrency`` runs first; then, for each of
``--restarts``, another such burst during which Redis is stopped once a quarter of it is answered,
started again once half of it is answered (after /readyz has reported Redis down), and /readyz is
polled until it answers 200. Each request is counted in the phase it was sent in: ``before``
(until Redis's server has exited), ``outage`` (until it is started again), ``recovering`` (until
/readyz answers 200), ``after recovery``. Prints a markdown table of answers by status per
phase (``--json``: JSON).

See bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench.common import BenchError, BenchStack, StackOptions, free_port, git_commit, log, stop_on_signals
from tests.redis_server import PrivateRedis

SERVICE_UNAVAILABLE_CODE = "service_unavailable"
KEEPALIVE_EXPIRY_SECONDS = 4.0
READINESS_TIMEOUT_SECONDS = 60.0
BURST_TIMEOUT_SECONDS = 600.0
PHASES = ("baseline", "before", "outage", "recovering", "after recovery")
COLUMNS = ("200", "429", "503 envelope", "503 other", "500", "other", "no answer")


@dataclass
class Answer:
    sent_at: float
    column: str
    # The transport error's class when nothing was answered.
    error: str = ""


@dataclass
class Load:
    """GET requests sent ``concurrency`` at a time; answers appended as they arrive (other threads
    watch ``answered``)."""

    base_url: str
    api_key: str
    concurrency: int
    answers: list[Answer] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return len(self.answers)

    def run(self, requests: int) -> list[Answer]:
        asyncio.run(self._send_all(requests))
        return self.answers

    async def _send_all(self, requests: int) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        # A connection idle for uvicorn's keep-alive timeout (5 s) is closed by the server; httpx's
        # own expiry is also 5 s, so a connection idle just under it could be reused as the server
        # closes it, and the request would fail with no answer. Clients retire them sooner.
        limits = httpx.Limits(max_connections=self.concurrency, keepalive_expiry=KEEPALIVE_EXPIRY_SECONDS)
        async with httpx.AsyncClient(
            base_url=self.base_url, headers=headers, limits=limits, timeout=60, trust_env=False
        ) as client:
            slots = asyncio.Semaphore(self.concurrency)
            await asyncio.gather(*(self._send_one(client, slots) for _ in range(requests)))

    async def _send_one(self, client: httpx.AsyncClient, slots: asyncio.Semaphore) -> None:
        async with slots:
            sent_at = time.monotonic()
            try:
                response = await client.get("/api/v1/sessions/")
            except httpx.HTTPError as error:
                self.answers.append(Answer(sent_at, "no answer", error=type(error).__name__))
                return
        self.answers.append(Answer(sent_at, column_of(response)))


def column_of(response: httpx.Response) -> str:
    if response.status_code == 503:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            return "503 other"
        return "503 envelope" if code == SERVICE_UNAVAILABLE_CODE else "503 other"
    return str(response.status_code) if str(response.status_code) in COLUMNS else "other"


@dataclass
class Restart:
    """When Redis went down and came back during one burst, and what /readyz said meanwhile."""

    stopped_at: float = 0.0
    started_at: float = 0.0
    ready_at: float = 0.0
    readiness_while_down: dict[str, Any] = field(default_factory=dict)

    def phase_of(self, answer: Answer) -> str:
        if answer.sent_at < self.stopped_at:
            return "before"
        if answer.sent_at < self.started_at:
            return "outage"
        return "recovering" if answer.sent_at < self.ready_at else "after recovery"


def wait_for(condition: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.005)
    raise BenchError(f"timed out after {timeout:.0f} s waiting for {what}")


def readiness(stack: BenchStack) -> tuple[int, dict[str, Any]]:
    response = httpx.get(f"{stack.base_url}/readyz", timeout=10, trust_env=False)
    body: dict[str, Any] = response.json()
    return response.status_code, body


def readiness_reporting_redis_down(stack: BenchStack) -> dict[str, Any] | None:
    status, body = readiness(stack)
    is_down = status != 200 and not body["checks"].get("redis", {}).get("ok", True)
    return {"http_status": status, **body} if is_down else None


def restart_during_burst(stack: BenchStack, redis: PrivateRedis, load: Load, requests: int) -> Restart:
    restart = Restart()
    with ThreadPoolExecutor(max_workers=1) as executor:
        burst = executor.submit(load.run, requests)
        wait_for(lambda: load.answered >= requests // 4, timeout=BURST_TIMEOUT_SECONDS, what="a quarter")
        redis.stop()
        restart.stopped_at = time.monotonic()  # the server has exited
        restart.readiness_while_down = wait_for(
            lambda: readiness_reporting_redis_down(stack),
            timeout=READINESS_TIMEOUT_SECONDS,
            what="/readyz to report redis down",
        )
        wait_for(lambda: load.answered >= requests // 2, timeout=BURST_TIMEOUT_SECONDS, what="half")
        restart.started_at = time.monotonic()
        redis.start()
        wait_for(lambda: readiness(stack)[0] == 200, timeout=READINESS_TIMEOUT_SECONDS, what="/readyz 200")
        restart.ready_at = time.monotonic()
        burst.result(timeout=BURST_TIMEOUT_SECONDS)
    stack.check_alive()
    return restart


def count_by_phase(answers: list[Answer], phase_of: Callable[[Answer], str]) -> dict[str, Counter[str]]:
    counts: dict[str, Counter[str]] = {}
    for answer in answers:
        counts.setdefault(phase_of(answer), Counter())[answer.column] += 1
    return counts


def run_bench(arguments: argparse.Namespace) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="agentry-redis-restarts-"))
    try:
        return _run_in(directory, arguments)
    finally:
        if arguments.keep:
            log(f"bench: kept the Redis log in {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


def _run_in(directory: Path, arguments: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"commit": git_commit(), "requests": arguments.requests, "rows": []}
    with PrivateRedis(port=free_port(), log_path=directory / "redis.log") as redis:
        options = StackOptions(
            database_url=arguments.database_url, redis_url=redis.url, keep_directory=arguments.keep
        )
        with BenchStack(options) as stack:
            report["mode"] = stack.mode
            log("bench: baseline burst")
            baseline = Load(stack.base_url, stack.api_key, arguments.concurrency).run(arguments.requests)
            report["rows"].append(_row("-", "baseline", Counter(answer.column for answer in baseline)))
            errors = Counter(answer.error for answer in baseline if answer.error)
            for number in range(1, arguments.restarts + 1):
                log(f"bench: burst with restart {number}")
                load = Load(stack.base_url, stack.api_key, arguments.concurrency)
                restart = restart_during_burst(stack, redis, load, arguments.requests)
                counts = count_by_phase(load.answers, restart.phase_of)
                report["rows"].extend(
                    _row(str(number), phase, counts.get(phase, Counter())) for phase in PHASES[1:]
                )
                report.setdefault("restarts", []).append(_restart_summary(number, restart))
                errors.update(answer.error for answer in load.answers if answer.error)
    report["transport_errors"] = dict(errors)
    return report


def _row(restart: str, phase: str, counts: Counter[str]) -> dict[str, Any]:
    return {
        "restart": restart,
        "phase": phase,
        "sent": sum(counts.values()),
        **{column: counts[column] for column in COLUMNS},
    }


def _restart_summary(number: int, restart: Restart) -> dict[str, Any]:
    checks = restart.readiness_while_down.get("checks", {})
    return {
        "restart": number,
        "outage_seconds": round(restart.started_at - restart.stopped_at, 2),
        "start_to_ready_seconds": round(restart.ready_at - restart.started_at, 2),
        "readyz_while_down_status": restart.readiness_while_down.get("http_status"),
        "readyz_while_down_failing": sorted(name for name, check in checks.items() if not check["ok"]),
        "readyz_redis_error": checks.get("redis", {}).get("error", ""),
    }


def markdown_report(report: dict[str, Any]) -> str:
    lines = [
        f"Redis restarts under load, commit {report['commit']}, {report['mode']}: "
        f"bursts of {report['requests']} GET /api/v1/sessions/ per row group",
        "",
        "| restart | phase | sent | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---:|" * (len(COLUMNS) + 1),
    ]
    for row in report["rows"]:
        cells = [row["restart"], row["phase"], str(row["sent"]), *(str(row[column]) for column in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| restart | outage (s) | start → /readyz 200 (s) | /readyz while down | failing checks |"]
    lines.append("|---|---:|---:|---|---|")
    for summary in report.get("restarts", []):
        lines.append(
            f"| {summary['restart']} | {summary['outage_seconds']} | {summary['start_to_ready_seconds']} "
            f"| {summary['readyz_while_down_status']} (redis: {summary['readyz_redis_error']}) "
            f"| {', '.join(summary['readyz_while_down_failing'])} |"
        )
    errors = ", ".join(f"{name}: {count}" for name, count in report["transport_errors"].items())
    lines += ["", f"No answer (transport errors at the client): {errors or 'none'}."]
    return "\n".join(lines)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", help="a PostgreSQL URL whose database the bench creates and drops")
    parser.add_argument("--requests", type=int, default=2000, help="requests per burst (default 2000)")
    parser.add_argument("--concurrency", type=int, default=50, help="requests in flight (default 50)")
    parser.add_argument("--restarts", type=int, default=3, help="Redis restarts, one per burst (default 3)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories and logs")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown tables")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    try:
        with stop_on_signals():
            report = run_bench(arguments)
    except (BenchError, FileNotFoundError) as error:
        log(f"bench failed: {error}")
        return 1
    except KeyboardInterrupt:
        log("bench interrupted; processes stopped and files removed")
        return 130
    print(json.dumps(report, indent=2) if arguments.json else markdown_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
