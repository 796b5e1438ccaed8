"""Python function calls per phase of a run, counted: a measure of its CPU that does not drift.

    .venv/bin/python bench/phase_calls.py [--runs 10] [--scenarios plain,tool]
    .venv/bin/python bench/phase_calls.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench --redis-url redis://127.0.0.1:6379/3

On these VMs a run's CPU time drifts by a third within minutes and doubles when other work
shares the two cores, so a change worth a tenth of it hides in the noise. How many Python
functions the API post and the run call does not move with the machine: the same code and
database give the same counts, run after run. Most of a run's CPU is Python (Django's query
building, the model SDK), so fewer calls is less CPU; work in C (libpq, JSON) is not counted.

Everything runs in this process against a fresh database (created and dropped, as the other
benches do) and the fake model server: the post goes through Django's test client with an API
key, then ``execute_run`` runs the run as a worker's thread would. Each phase counts the calls it
makes and the calls they make (inclusive), averaged over ``--runs`` runs after three warm-ups;
phases inside other phases are indented. It also counts the SQL statements of one post and one
run (BEGIN and COMMIT included where the backend sends them as statements).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BENCH_TENANT_LIMITS,
    BENCH_THROTTLE_RATE,
    BenchDatabase,
    PostgresBenchDatabase,
    SqliteBenchDatabase,
    git_commit,
    log,
)
from tests.fake_model_server import FakeModelServer, Turn

SCENARIO_TURNS: dict[str, list[Turn]] = {
    "plain": [Turn(text="Hello! How can I help?", usage=(20, 10, 0, 0))],
    "tool": [
        Turn(
            text="Let me calculate.", tool_calls=[("calculator", {"expression": "6*7"})], usage=(20, 10, 5, 0)
        ),
        Turn(text="6*7 is 42.", usage=(40, 8, 0, 3)),
    ],
}
WARMUP_RUNS = 3


@dataclass(frozen=True)
class Phase:
    name: str
    depth: int
    function: Callable[..., Any]


def phases() -> list[Phase]:
    """The post's and the run's phases, in the order they happen (imported after Django's set-up)."""
    from rest_framework.views import APIView

    import sessions.api
    import sessions.compaction
    import sessions.events
    import sessions.execution
    import sessions.lane
    import sessions.recorder
    import sessions.run_end
    import sessions.selectors
    import sessions.services
    import sessions.tasks
    import tenants.authentication
    import tenants.quotas
    import tools.registry
    from agents.runtime.providers.anthropic_client import AnthropicModelClient

    recorder = sessions.recorder.DjangoRunRecorder
    return [
        Phase("post: DRF dispatch", 0, APIView.dispatch),
        Phase("API key authentication", 1, tenants.authentication.ApiKeyAuthentication.authenticate),
        Phase("the view", 1, sessions.api.SessionViewSet.messages),
        Phase("session read", 2, sessions.selectors.session_get_for_posting),
        Phase("lane state", 2, sessions.selectors.lane_state_for),
        Phase("quotas", 2, tenants.quotas.check_post_message_quotas),
        Phase("message, run and event stored", 2, sessions.services._store_message_and_run),
        Phase("run: execute_run", 0, sessions.tasks.execute_run),
        Phase("claim", 1, sessions.lane.run_claim),
        Phase("tool set", 1, tools.registry.toolset_for_run),
        Phase("transcript", 1, sessions.execution.transcript_for),
        Phase("recorder set-up", 1, recorder.__init__),
        Phase("model step starts", 1, recorder.start_step),
        Phase("model SDK request and stream", 1, AnthropicModelClient.stream),
        Phase("steps complete", 1, recorder.complete_step),
        Phase("answers stored", 1, recorder.append_message),
        Phase("run's end", 1, sessions.run_end.run_finish),
        Phase("lane's next run", 1, sessions.tasks.run_dispatch_next),
        Phase("(events stored, within the above)", 1, sessions.events._store),
    ]


class CallCounter:
    """Counts Python calls (and calls into C) while installed, inclusive per watched function."""

    def __init__(self, watched: list[Phase]) -> None:
        self._names: dict[CodeType, str] = {phase.function.__code__: phase.name for phase in watched}
        self.totals: dict[str, int] = {phase.name: 0 for phase in watched}
        self._calls = 0
        self._open: list[tuple[FrameType, str, int]] = []

    def _profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event == "call":
            self._calls += 1
            name = self._names.get(frame.f_code)
            if name is not None:
                self._open.append((frame, name, self._calls))
        elif event == "c_call":
            self._calls += 1
        elif event == "return" and self._open and self._open[-1][0] is frame:
            _, name, started = self._open.pop()
            self.totals[name] += self._calls - started

    @contextmanager
    def installed(self) -> Iterator[None]:
        sys.setprofile(self._profile)
        try:
            yield
        finally:
            sys.setprofile(None)


@contextmanager
def bench_database(url: str | None) -> Iterator[BenchDatabase]:
    with tempfile.TemporaryDirectory(prefix="agentry-bench-") as directory:
        database: BenchDatabase = PostgresBenchDatabase(url) if url else SqliteBenchDatabase(Path(directory))
        database.create()
        os.environ["AGENTRY_DATA_DIR"] = str(Path(directory) / "data")
        try:
            yield database
        finally:
            from django.db import connections

            connections.close_all()
            database.drop()


def configure(database: BenchDatabase, redis_url: str | None, model: FakeModelServer) -> None:
    """Production-like settings (DEBUG off), as BenchStack gives its processes."""
    from cryptography.fernet import Fernet

    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(48),
        ALLOWED_HOSTS="testserver",
        FIELD_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
        DATABASE_URL=database.url,
        Q_CLUSTER_NAME=f"agentry-bench-{secrets.token_hex(4)}",
        ANTHROPIC_API_KEY="bench",
        ANTHROPIC_BASE_URL=model.url,
        API_THROTTLE_RATE=BENCH_THROTTLE_RATE,
    )
    os.environ.pop("REDIS_URL", None)
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def measure(scenario: str, runs: int, model: FakeModelServer) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from sessions.tasks import execute_run
    from tenants.models import Role
    from tests.factories import make_api_key, make_tenant, make_user

    tenant = make_tenant(f"bench-{scenario}")
    tenant.settings = {**BENCH_TENANT_LIMITS, "active_runs_per_user": 1_000_000}
    tenant.save()
    owner = make_user(f"bench-{scenario}@example.com", tenant=tenant, role=Role.OWNER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(tenant=tenant, user=owner)}")
    agent = _created(client, "/api/v1/agents/", {"name": "Bench agent", "model_provider": "anthropic"})

    def new_session() -> str:
        return str(_created(client, "/api/v1/sessions/", {"agent": agent["id"]})["id"])

    def post(session_id: str) -> str:
        body = _created(client, f"/api/v1/sessions/{session_id}/messages/", {"content": "hello"})
        return str(body["run"]["id"])

    model.script(*(SCENARIO_TURNS[scenario] * (WARMUP_RUNS + runs + 1)))
    for _ in range(WARMUP_RUNS):
        execute_run(post(new_session()))
    session_ids = [new_session() for _ in range(runs + 1)]  # a new session per message, as a user starts
    counter = CallCounter(phases())
    with counter.installed():
        run_ids = [post(session_id) for session_id in session_ids[:runs]]
        for run_id in run_ids:
            execute_run(run_id)
    with CaptureQueriesContext(connection) as posting:
        run_id = post(session_ids[-1])
    with CaptureQueriesContext(connection) as running:
        execute_run(run_id)
    return {
        "calls_per_run": {name: round(total / runs) for name, total in counter.totals.items()},
        "statements": {"post": len(posting), "run": len(running)},
    }


def _created(client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(path, body, format="json")
    if response.status_code not in (201, 202):
        raise SystemExit(f"{path} answered {response.status_code}: {response.content[:500]!r}")
    created: dict[str, Any] = response.json()
    return created


def markdown(report: dict[str, Any]) -> str:
    scenarios = list(report["scenarios"])
    lines = [
        f"Python calls per phase: commit {report['commit']}, {report['mode']}, {report['runs']} runs "
        f"per scenario after {WARMUP_RUNS} warm-ups (inclusive counts; indented phases are inside "
        "the one above).",
        "",
        "| phase | " + " | ".join(scenarios) + " |",
        "| --- |" + " ---: |" * len(scenarios),
    ]
    for phase in phases():
        counts = [f"{report['scenarios'][name]['calls_per_run'][phase.name]:,}" for name in scenarios]
        lines.append(f"| {'  ' * phase.depth}{phase.name} | " + " | ".join(counts) + " |")
    for part in ("post", "run"):
        counts = [str(report["scenarios"][name]["statements"][part]) for name in scenarios]
        lines.append(f"| SQL statements of one {part} | " + " | ".join(counts) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", help="a PostgreSQL URL whose database the bench creates and drops")
    parser.add_argument("--redis-url", help="Redis for the cache and channel layer (the run's announcements)")
    parser.add_argument("--runs", type=int, default=10, help="runs per scenario, counted (default 10)")
    parser.add_argument("--scenarios", default="plain,tool", help="comma-separated: plain,tool")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown table")
    arguments = parser.parse_args(argv)
    scenarios = [name for name in arguments.scenarios.split(",") if name]
    with FakeModelServer() as model, bench_database(arguments.database_url) as database:
        configure(database, arguments.redis_url, model)
        mode = f"{database.label}{' + Redis' if arguments.redis_url else ''}"
        report: dict[str, Any] = {
            "commit": git_commit(),
            "mode": mode,
            "runs": arguments.runs,
            "scenarios": {},
        }
        for scenario in scenarios:
            log(f"bench: {scenario}: {arguments.runs} runs")
            report["scenarios"][scenario] = measure(scenario, arguments.runs, model)
    print(json.dumps(report, indent=2) if arguments.json else markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
