"""A quiet tenant's post beside a busy one, and into a long conversation: what a post reads as data grows.

    .venv/bin/python bench/neighbours.py                    # embedded default: SQLite
    .venv/bin/python bench/neighbours.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench_neighbours

Every post counts its member's active runs, the member's runs of the last minute and the tokens
of the tenant's steps that finished in the last minute (``tenants.quotas``), and reads its
conversation's tree (``sessions.branches``). This bench stores a quiet tenant with a long history
(``--history`` runs over 90 days, two model steps each) and one conversation of
``--conversation`` messages, and a busy neighbour whose ``--busy`` runs all finished their two
steps in the last minute, with ``--waiting`` more of its runs waiting for an approval (active
runs). Then it times, in this process, the quota statement alone and a whole post (to a new
session) through Django's test client for a member of each tenant, a post to the long
conversation, and that conversation's tree read alone (``sessions.branches.conversation_tree``,
which every post makes): medians and p95 of ``--repeats`` after five warm-ups. A post should
cost the same whatever other tenants store, and a long conversation no more than its length.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BENCH_TENANT_LIMITS, git_commit, log, median, percentile
from bench.phase_calls import bench_database, configure
from tests.fake_model_server import FakeModelServer

BATCH = 5_000
WARMUPS = 5


def store_tenant(name: str, *, finished_runs: int, spread: timedelta, waiting_runs: int) -> dict[str, Any]:
    """A tenant, its owner with an API key, an agent and a session, and its stored runs and steps."""
    from django.utils import timezone

    from sessions.models import Run, RunStatus, Session, Step, StepKind, StepStatus
    from tenants.models import Role
    from tests.factories import make_agent, make_api_key, make_tenant, make_user

    tenant = make_tenant(name)
    tenant.settings = {**BENCH_TENANT_LIMITS, "active_runs_per_user": 1_000_000}
    tenant.save()
    owner = make_user(f"owner@{name}.example.com", tenant=tenant, role=Role.OWNER)
    agent = make_agent(tenant=tenant, model_provider="anthropic")
    session = Session.objects.create(tenant=tenant, agent=agent, created_by=owner)
    now = timezone.now()
    # Old checkouts have no Step.tenant: the bench runs against the commit before it too.
    step_tenant = {"tenant": tenant} if any(f.name == "tenant" for f in Step._meta.get_fields()) else {}
    for start in range(0, finished_runs + waiting_runs, BATCH):
        count = min(BATCH, finished_runs + waiting_runs - start)
        runs = [
            Run(
                id=uuid.uuid4(),
                tenant=tenant,
                session=session,
                agent=agent,
                created_by=owner,
                status=RunStatus.COMPLETED if start + i < finished_runs else RunStatus.AWAITING_APPROVAL,
            )
            for i in range(count)
        ]
        Run.objects.bulk_create(runs)
        # Created at the far end of the span, each finished somewhere in it.
        Run.objects.filter(pk__in=[run.pk for run in runs]).update(created_at=now - spread)
        moments = [now - spread * ((start + i) / max(1, finished_runs)) for i in range(count)]
        steps = [
            Step(
                run=run,
                index=index,
                kind=StepKind.MODEL_CALL,
                status=StepStatus.COMPLETED,
                input_tokens=100,
                output_tokens=50,
                started_at=moment,
                finished_at=moment,
                **step_tenant,
            )
            for run, moment in zip(runs, moments, strict=True)
            if run.status == RunStatus.COMPLETED
            for index in range(2)
        ]
        Step.objects.bulk_create(steps, batch_size=1_000)
    return {
        "tenant": tenant,
        "owner": owner,
        "agent": agent,
        "api_key": make_api_key(tenant=tenant, user=owner),
    }


def store_conversation(stored: dict[str, Any], messages: int) -> str:
    """A session of the tenant with ``messages`` placed messages, questions and answers in turn,
    each question answered by a completed run; returns its id."""
    from django.db import transaction

    from sessions.models import Message, MessageRole, Run, RunStatus, Session

    tenant, owner, agent = stored["tenant"], stored["owner"], stored["agent"]
    session = Session.objects.create(tenant=tenant, agent=agent, created_by=owner)
    ids = [uuid.uuid4() for _ in range(messages)]
    runs = {index: uuid.uuid4() for index in range(0, messages, 2)}
    # A message and its run name each other: both go in one transaction, the keys checked at commit.
    with transaction.atomic():
        Message.objects.bulk_create(
            Message(
                id=ids[index],
                tenant=tenant,
                session=session,
                parent_id=ids[index - 1] if index else None,
                position=index + 1,
                role=MessageRole.USER if index % 2 == 0 else MessageRole.ASSISTANT,
                content=[{"type": "text", "text": f"message {index}"}],
                run_id=runs[index - index % 2],
            )
            for index in range(messages)
        )
        Run.objects.bulk_create(
            Run(
                id=run_id,
                tenant=tenant,
                session=session,
                agent=agent,
                created_by=owner,
                user_message_id=ids[index],
                status=RunStatus.COMPLETED,
            )
            for index, run_id in runs.items()
        )
    Session.objects.filter(pk=session.pk).update(shown_message_id=ids[-1], last_message_position=messages)
    return str(session.pk)


def timed(call: Callable[[], Any], repeats: int) -> list[float]:
    for _ in range(WARMUPS):
        call()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000)
    return times


def measure(
    stored: dict[str, Any], repeats: int, *, conversation: str | None = None
) -> dict[str, list[float]]:
    from django.utils import timezone
    from rest_framework.test import APIClient

    from sessions.branches import conversation_tree
    from sessions.state import ACTIVE_RUN_STATUSES
    from sessions.statements.post_reads import quota_counts
    from tenants.quotas import RATE_WINDOW

    tenant, owner = stored["tenant"], stored["owner"]

    def count() -> None:
        quota_counts(
            tenant_id=tenant.pk,
            user_id=owner.pk,
            since=timezone.now() - RATE_WINDOW,
            active_statuses=sorted(ACTIVE_RUN_STATUSES),
        )

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {stored['api_key']}")
    sessions = iter(
        [
            client.post("/api/v1/sessions/", {"agent": str(stored["agent"].pk)}, format="json").json()["id"]
            for _ in range(WARMUPS + repeats)
        ]
    )

    def post_to(session_id: str) -> None:
        response = client.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json")
        if response.status_code != 202:
            raise SystemExit(f"the post answered {response.status_code}: {response.content[:300]!r}")

    timings = {
        "quota statement": timed(count, repeats),
        "post": timed(lambda: post_to(next(sessions)), repeats),
    }
    if conversation is not None:
        timings["post to the long conversation"] = timed(lambda: post_to(conversation), repeats)
        timings["the long conversation's tree read"] = timed(
            lambda: conversation_tree(uuid.UUID(conversation)), repeats
        )
    return timings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database-url", help="a PostgreSQL URL whose database name contains 'bench'")
    parser.add_argument("--history", type=int, default=100_000, help="the quiet tenant's runs over 90 days")
    parser.add_argument("--busy", type=int, default=10_000, help="the busy tenant's runs in the last minute")
    parser.add_argument("--waiting", type=int, default=2_000, help="the busy tenant's runs awaiting approval")
    parser.add_argument(
        "--conversation", type=int, default=1_000, help="messages of the quiet tenant's long conversation"
    )
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--json", action="store_true", help="print JSON instead of the markdown table")
    options = parser.parse_args(argv)
    with FakeModelServer() as model, bench_database(options.database_url) as database:
        configure(database, None, model)
        log(f"bench: storing {options.history} + {options.busy + options.waiting} runs ({database.label})")
        quiet = store_tenant(
            "quiet", finished_runs=options.history, spread=timedelta(days=90), waiting_runs=0
        )
        busy = store_tenant(
            "busy", finished_runs=options.busy, spread=timedelta(seconds=50), waiting_runs=options.waiting
        )
        conversation = store_conversation(quiet, options.conversation)
        _analyze()
        # What storing left in this process is not a server's: frozen, the collector no longer
        # walks it during the timings (it made their p95 three times the median).
        gc.collect()
        gc.freeze()
        timings = {
            "quiet": measure(quiet, options.repeats, conversation=conversation),
            "busy": measure(busy, options.repeats),
        }
    report = {
        "commit": git_commit(),
        "database": database.label,
        "options": vars(options),
        "timings_ms": {
            tenant_name: {
                what: {"median": median(times), "p95": percentile(times, 0.95)}
                for what, times in by_what.items()
            }
            for tenant_name, by_what in timings.items()
        },
    }
    print(json.dumps(report, indent=2) if options.json else markdown(report))
    return 0


def markdown(report: dict[str, Any]) -> str:
    options = report["options"]
    lines = [
        f"What a post reads as the data grows: commit {report['commit']}, {report['database']}, "
        f"quiet tenant {options['history']:,} runs over 90 days and a conversation of "
        f"{options['conversation']:,} messages, busy tenant {options['busy']:,} runs "
        f"finished in the last minute and {options['waiting']:,} awaiting approval; {options['repeats']} "
        f"timings after {WARMUPS} warm-ups.",
        "",
        "| tenant | timed | median ms | p95 ms |",
        "| --- | --- | ---: | ---: |",
    ]
    for tenant_name, by_what in report["timings_ms"].items():
        for what, times in by_what.items():
            lines.append(f"| {tenant_name} | {what} | {times['median']:.2f} | {times['p95']:.2f} |")
    return "\n".join(lines)


def _analyze() -> None:
    """What autovacuum would do to a database that grew this way: PostgreSQL's dead row versions
    (left by the updates that backdate the runs) cleaned from the indexes, and statistics."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE" if connection.vendor == "postgresql" else "ANALYZE")


if __name__ == "__main__":
    raise SystemExit(main())
