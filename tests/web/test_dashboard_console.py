"""The dashboard's run charts, token rankings, recent runs with their children, and the MCP banner."""

import re
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from agents.models import Agent
from billing.usage import UsageRow
from mcp_servers.models import McpServer
from sessions.models import Run, RunStatus, Step
from tenants.models import Tenant
from tests.factories import make_agent
from tests.web.conftest import World
from tests.web.knowledge import actor_of
from tools.models import AgentTool, Tool, ToolKind
from web.charts import run_charts, token_ranking_charts
from web.run_activity import (
    RunDay,
    RunGroup,
    recent_runs_for_actor,
    run_days_for_actor,
    run_groups_for_actor,
    servers_down_for_actor,
)
from web.selectors import UsageReports, usage_reports_for_actor

ClientFor = Callable[[Any], Client]
DAY = date(2026, 11, 20)


def noon(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, 12, tzinfo=UTC)


def seeded_run(
    world: World, *, user: Any, day: date, status: str = RunStatus.COMPLETED, **fields: Any
) -> Run:
    fields.setdefault("agent", world.agent_a)
    run = Run.objects.create(
        tenant=world.cast.tenant_a,
        session=world.session_a,
        created_by=user,
        status=status,
        **fields,
    )
    Run.objects.filter(pk=run.pk).update(created_at=noon(day))
    return run


def reports_with(
    *, run_days: list[RunDay] | None = None, agents: list[UsageRow] | None = None
) -> UsageReports:
    return UsageReports(
        since=DAY - timedelta(days=2),
        until=DAY,
        days=[],
        agents=agents or [],
        members=[],
        models=[],
        run_days=run_days or [],
        run_agents=[],
        run_members=[],
        is_whole_tenant=True,
    )


def usage_row(key: str, *, input_tokens: int, output_tokens: int, cost_micros: int) -> UsageRow:
    return UsageRow(key, key.title(), 1, 1, input_tokens, output_tokens, 0, 0, cost_micros, 0)


def test_runs_and_errors_per_day_count_top_level_runs_by_the_day_they_started(world: World) -> None:
    bob, alice = world.cast.bob, world.cast.alice
    Run.objects.filter(pk=world.run_a.pk).update(created_at=noon(DAY - timedelta(days=5)))
    parent = seeded_run(world, user=bob, day=DAY - timedelta(days=2))
    seeded_run(world, user=bob, day=DAY - timedelta(days=2), status=RunStatus.FAILED)
    seeded_run(world, user=bob, day=DAY, status=RunStatus.TIMEOUT)
    seeded_run(world, user=alice, day=DAY, status=RunStatus.FAILED)
    # An executor counts with its parent; it is not a run of its own here.
    seeded_run(world, user=bob, day=DAY, status=RunStatus.FAILED, parent_run=parent)
    Run.objects.filter(pk=world.run_b.pk).update(created_at=noon(DAY))
    since = DAY - timedelta(days=2)

    for_alice = run_days_for_actor(actor=actor_of(alice, world.cast.tenant_a), since=since, until=DAY)
    for_bob = run_days_for_actor(actor=actor_of(bob, world.cast.tenant_a), since=since, until=DAY)

    assert for_alice == [RunDay("2026-11-18", 2, 1), RunDay("2026-11-19", 0, 0), RunDay("2026-11-20", 2, 2)]
    # A member counts their own runs, as the usage reports do.
    assert for_bob == [RunDay("2026-11-18", 2, 1), RunDay("2026-11-19", 0, 0), RunDay("2026-11-20", 1, 1)]


def test_runs_per_agent_and_member_count_top_level_runs_and_their_errors(world: World) -> None:
    other = make_agent(tenant=world.cast.tenant_a, name="Other")
    Run.objects.filter(pk=world.run_a.pk).update(created_at=noon(DAY))
    parent = seeded_run(world, user=world.cast.bob, day=DAY, status=RunStatus.FAILED)
    seeded_run(world, user=world.cast.bob, day=DAY, status=RunStatus.FAILED, parent_run=parent)
    seeded_run(world, user=world.cast.alice, day=DAY, status=RunStatus.TIMEOUT, agent=other)
    seeded_run(world, user=world.cast.alice, day=DAY - timedelta(days=9))
    Run.objects.filter(pk=world.run_b.pk).update(created_at=noon(DAY))
    alice = actor_of(world.cast.alice, world.cast.tenant_a)
    since = DAY - timedelta(days=2)

    by_agent = run_groups_for_actor(actor=alice, group_by="agent", since=since, until=DAY)
    by_member = run_groups_for_actor(actor=alice, group_by="member", since=since, until=DAY)

    assert by_agent == [
        RunGroup(str(world.agent_a.pk), "Helper", 2, 1),
        RunGroup(str(other.pk), "Other", 1, 1),
    ]
    assert by_member == [
        RunGroup(str(world.cast.bob.pk), "bob@a.test", 2, 1),
        RunGroup(str(world.cast.alice.pk), "alice@a.test", 1, 1),
    ]


def test_run_charts_draw_a_column_per_day_scaled_to_the_busiest() -> None:
    days = [RunDay("2026-11-18", 2, 1), RunDay("2026-11-19", 0, 0), RunDay("2026-11-20", 4, 2)]

    runs, errors, by_agent, by_member = run_charts(reports_with(run_days=days))

    assert [(bar.x, bar.y, bar.width, bar.height, bar.value_text) for bar in runs.chart.bars] == [
        (30.0, 80.0, 140.0, 80.0, "2 runs"),
        (230.0, 160.0, 140.0, 0.0, "0 runs"),
        (430.0, 0.0, 140.0, 160.0, "4 runs"),
    ]
    assert [bar.height for bar in errors.chart.bars] == [80.0, 0.0, 160.0]
    assert runs.chart.summary == "Runs per day from 2026-11-18 to 2026-11-20: 6 in all."
    assert (
        errors.chart.summary == "Runs that failed or timed out per day from 2026-11-18 to 2026-11-20: 3 of 6."
    )
    assert (by_agent.chart.bars, by_agent.chart.summary) == (
        [],
        "No runs by agent in 2026-11-18 to 2026-11-20.",
    )
    assert (by_member.slug, by_member.is_columns, runs.is_columns) == ("runs-per-member", False, True)


def test_token_rankings_order_by_tokens_not_cost() -> None:
    agents = [
        usage_row("dear", input_tokens=100, output_tokens=50, cost_micros=9000),
        usage_row("busy", input_tokens=500, output_tokens=100, cost_micros=10),
    ]

    by_agent, by_member = token_ranking_charts(reports_with(agents=agents), "the days")

    assert [(bar.label, bar.width, bar.value_text) for bar in by_agent.chart.bars] == [
        ("Busy", 600.0, "600 tokens"),
        ("Dear", 150.0, "150 tokens"),
    ]
    assert by_agent.chart.summary == "Tokens by agent in the days: 750 in all; the most is Busy with 600."
    assert by_member.chart.bars == []


def test_token_and_cost_per_member_come_from_model_calls(world: World) -> None:
    today = timezone.now().astimezone(UTC).date()
    bobs = seeded_run(world, user=world.cast.bob, day=today)
    alices = seeded_run(world, user=world.cast.alice, day=today)
    for run, tokens in ((bobs, (300, 100)), (alices, (100, 0))):
        Step.objects.create(
            run=run,
            tenant_id=run.tenant_id,
            index=0,
            kind="model_call",
            status="completed",
            input_tokens=tokens[0],
            output_tokens=tokens[1],
            cost_micros=tokens[0],
            finished_at=timezone.now(),
        )

    reports = usage_reports_for_actor(actor=actor_of(world.cast.alice, world.cast.tenant_a))
    _, by_member = token_ranking_charts(reports, "the days")

    assert [(bar.label, bar.width) for bar in by_member.chart.bars] == [
        ("bob@a.test", 600.0),
        ("alice@a.test", 150.0),
    ]
    assert reports.run_days[-1] == RunDay(today.isoformat(), 3, 0)


def test_the_dashboard_draws_run_and_error_charts_and_a_table_of_the_same_days(
    world: World, client_for: ClientFor
) -> None:
    today = timezone.now().astimezone(UTC).date()
    Run.objects.filter(pk=world.run_a.pk).update(created_at=noon(today - timedelta(days=1)))
    seeded_run(world, user=world.cast.bob, day=today, status=RunStatus.FAILED)
    seeded_run(world, user=world.cast.bob, day=today)
    Run.objects.filter(pk=world.run_b.pk).update(created_at=noon(today))

    body = client_for(world.cast.alice).get("/").content.decode()

    runs_chart = body[body.index('data-chart="runs-per-day"') : body.index('data-chart="errors-per-day"')]
    titles = re.findall(r"<title>(\d\d-\d\d: \d+ runs?)</title>", runs_chart)
    assert len(titles) == 30
    assert titles[-2:] == [f"{today - timedelta(days=1):%m-%d}: 1 run", f"{today:%m-%d}: 2 runs"]
    assert 'height="160.0" rx="2"><title>' + f"{today:%m-%d}: 2 runs" in runs_chart
    assert f'<th scope="row">{today.isoformat()}</th><td>2</td><td>1</td>' in runs_chart
    assert '<h3 id="tokens-per-agent-title">Tokens per agent</h3>' in body
    assert '<h3 id="tokens-per-member-title">Tokens per member</h3>' in body


def test_recent_runs_fold_executors_and_sub_agents_under_their_parent(
    world: World, client_for: ClientFor
) -> None:
    parent = seeded_run(world, user=world.cast.bob, day=DAY, input_tokens=100, output_tokens=20)
    first = seeded_run(
        world,
        user=world.cast.bob,
        day=DAY,
        parent_run=parent,
        title="s1: add",
        input_tokens=50,
        output_tokens=5,
    )
    second = seeded_run(
        world,
        user=world.cast.bob,
        day=DAY,
        parent_run=parent,
        title="look it up",
        parent_tool_call_id="call-1",
        input_tokens=70,
        output_tokens=7,
    )

    recent = recent_runs_for_actor(actor=actor_of(world.cast.bob, world.cast.tenant_a))
    body = client_for(world.cast.bob).get("/").content.decode()

    assert [(item.run.pk, [child.pk for child in item.children]) for item in recent] == [
        (world.run_a.pk, []),
        (parent.pk, [first.pk, second.pk]),
    ]
    assert recent[1].total_tokens == 252
    assert "<summary>2 executors or sub-agents</summary>" in body
    assert f'<a href="/runs/{first.pk}/">s1: add</a>' in body
    assert body.count('data-run-row="') == 2
    assert '<td class="num" data-run-tokens>252<br>' in body


def down_server(tenant: Tenant, name: str, *, used_by: Agent | None = None) -> McpServer:
    server = McpServer.objects.create(
        tenant=tenant, name=name, transport="streamable_http", url="https://x.example", health_status="down"
    )
    if used_by is not None:
        tool = Tool.objects.create(tenant=tenant, name=f"{name}__get", kind=ToolKind.MCP, mcp_server=server)
        AgentTool.objects.create(agent=used_by, tool=tool)
    return server


@pytest.mark.parametrize("user", ["alice", "bob"])
def test_the_banner_names_only_down_servers_an_active_agent_of_the_tenant_uses(
    world: World, client_for: ClientFor, user: str
) -> None:
    tenant = world.cast.tenant_a
    down_server(tenant, "unused-srv")
    down_server(tenant, "dormant-srv", used_by=make_agent(tenant=tenant, name="Dormant", is_active=False))
    down_server(tenant, "search", used_by=world.agent_a)
    down_server(world.cast.tenant_b, "carols-srv", used_by=world.agent_b)
    member = getattr(world.cast, user)

    servers = servers_down_for_actor(actor=actor_of(member, tenant))
    body = client_for(member).get("/").content.decode()

    assert [server.name for server in servers] == ["search"]
    assert "1 MCP server down:" in body and ">search</a>" in body
    assert "unused-srv" not in body and "dormant-srv" not in body and "carols-srv" not in body


def test_no_banner_when_the_down_servers_are_unused(world: World, client_for: ClientFor) -> None:
    down_server(world.cast.tenant_a, "unused")
    down_server(world.cast.tenant_b, "carols", used_by=world.agent_b)

    body = client_for(world.cast.alice).get("/").content.decode()

    assert "MCP server down" not in body and "MCP servers down:" not in body


def test_carols_runs_stay_out_of_tenant_as_dashboard(world: World, client_for: ClientFor) -> None:
    today = timezone.now().astimezone(UTC).date()
    Run.objects.filter(pk=world.run_a.pk).update(created_at=noon(today))
    Run.objects.filter(pk=world.run_b.pk).update(created_at=noon(today), status=RunStatus.FAILED)
    before = Run.objects.values().get(pk=world.run_b.pk)

    recent = recent_runs_for_actor(actor=actor_of(world.cast.alice, world.cast.tenant_a))
    days = run_days_for_actor(actor=actor_of(world.cast.alice, world.cast.tenant_a), since=today, until=today)
    body = client_for(world.cast.alice).get("/").content.decode()

    assert [item.run.pk for item in recent] == [world.run_a.pk]
    assert days == [RunDay(today.isoformat(), 1, 0)]
    assert str(world.run_b.pk)[:8] not in body
    assert Run.objects.values().get(pk=world.run_b.pk) == before


def test_the_weeks_run_counts_leave_children_to_their_parent_but_count_their_tokens(
    world: World, client_for: ClientFor
) -> None:
    today = timezone.now().astimezone(UTC).date()
    parent = seeded_run(world, user=world.cast.bob, day=today, status=RunStatus.FAILED)
    seeded_run(world, user=world.cast.bob, day=today, parent_run=parent, input_tokens=40, output_tokens=10)

    body = client_for(world.cast.bob).get("/").content.decode()

    # run_a (150 tokens) and the failed parent; the executor's 50 tokens count in the total.
    assert '<p class="stat-value">2</p><p class="stat-note">1 completed · 1 failed</p>' in body
    assert 'title="200 tokens">200</p>' in body
