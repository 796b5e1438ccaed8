"""The run page's waterfall (web/waterfall.py) and the timeline's human event labels."""

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from sessions.events import EVENT_TYPES
from sessions.models import Run, RunEvent, RunStatus, Step
from sessions.run_end import run_finish
from tests.web.conftest import World, finished_conversation
from web.timeline import EVENT_LABELS, SELF_TRANSITION_TEXT, event_label, timeline_entries
from web.waterfall import Span, step_spans, wait_spans, waterfall_layout

ClientFor = Callable[[Any], Client]
T0 = datetime(2026, 11, 20, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def status_event(seq: int, seconds: float, before: str, after: str) -> RunEvent:
    return RunEvent(seq=seq, type="run.status", data={"from": before, "to": after}, created_at=at(seconds))


def test_every_event_type_of_the_contract_has_a_human_label() -> None:
    missing = sorted(set(EVENT_TYPES) - set(EVENT_LABELS))

    assert missing == []
    assert all("." not in label and label[0].isupper() for label in EVENT_LABELS.values())
    assert event_label("plan.created") == "Plan created"
    assert event_label("step.started") == "Step started"
    # A type newer than the table still reads as words, never as its wire name.
    assert event_label("input.requested") == "Input requested"


def test_a_self_transition_says_what_happened_and_plan_events_read_as_words() -> None:
    events = [
        status_event(1, 0, "planning", "executing"),
        status_event(2, 1, "executing", "executing"),
        RunEvent(seq=3, type="plan.created", data={"steps": [{"id": "s1"}, {"id": "s2"}]}, created_at=at(2)),
        RunEvent(
            seq=4, type="plan.updated", data={"steps": [{}], "reason": "steps_started"}, created_at=at(3)
        ),
        RunEvent(seq=5, type="step.started", data={"index": 0, "kind": "model_call"}, created_at=at(4)),
        RunEvent(seq=6, type="artifact.created", data={}, created_at=at(5)),
    ]

    summaries = [entry.summary for entry in timeline_entries(events)]

    assert summaries == [
        "Status planning → executing",
        SELF_TRANSITION_TEXT,
        "Plan created: 2 steps",
        "Plan updated: 1 step (steps started)",
        "Step 1 started (model call)",
        "File created",
    ]


def test_waterfall_geometry_places_each_span_by_its_start_and_duration() -> None:
    spans = [
        Span("child_run", "Executor: s1", "completed", at(3), at(8), "/runs/x/"),
        Span("model_call", "Model call 1", "completed", at(0), at(2)),
        Span("tool_call", "Tool: calculator", "failed", at(2), at(3)),
        Span("wait", "Waiting for approval", "completed", at(8), at(9)),
        Span("model_call", "Model call 2", "completed", at(10), at(10)),
        Span("model_call", "Model call 3", "running", at(9.5), None),
    ]

    waterfall = waterfall_layout(spans, start=at(0), end=at(10))

    assert waterfall.total_seconds == 10.0
    assert [(bar.label, bar.offset_percent, bar.width_percent) for bar in waterfall.bars] == [
        ("Model call 1", 0.0, 20.0),
        ("Tool: calculator", 20.0, 10.0),
        ("Executor: s1", 30.0, 50.0),
        ("Waiting for approval", 80.0, 10.0),
        ("Model call 3", 95.0, 5.0),
        # An instant still shows, inside the axis.
        ("Model call 2", 99.5, 0.5),
    ]
    assert [(bar.starts_after_seconds, bar.duration_seconds, bar.is_open) for bar in waterfall.bars][2:5] == [
        (3.0, 5.0, False),
        (8.0, 1.0, False),
        (9.5, 0.5, True),
    ]
    assert waterfall.bars[2].href == "/runs/x/"


def test_a_span_before_the_runs_start_widens_the_axis() -> None:
    waterfall = waterfall_layout(
        [Span("child_run", "Executor", "completed", at(-2), at(2))], start=at(0), end=at(2)
    )

    assert (waterfall.total_seconds, waterfall.bars[0].offset_percent, waterfall.bars[0].width_percent) == (
        4.0,
        0.0,
        100.0,
    )


def test_waits_come_from_status_events_including_kinds_this_page_does_not_know() -> None:
    events = [
        status_event(1, 0, "queued", "planning"),
        status_event(2, 1, "planning", "executing"),
        status_event(3, 2, "executing", "awaiting_approval"),
        status_event(4, 5, "awaiting_approval", "executing"),
        status_event(5, 6, "executing", "awaiting_input"),
        status_event(6, 7, "awaiting_input", "executing"),
        status_event(7, 8, "executing", "awaiting_payment"),
    ]

    spans = wait_spans(events)

    assert [(span.label, span.start, span.end) for span in spans] == [
        ("Waiting for approval", at(2), at(5)),
        ("Waiting for an answer", at(6), at(7)),
        ("Waiting (payment)", at(8), None),
    ]


def test_steps_are_labelled_and_pending_ones_left_off() -> None:
    steps = [
        Step(index=0, kind="model_call", status="completed", input={"purpose": "plan"}, started_at=at(0)),
        Step(index=1, kind="tool_call", status="completed", input={"name": "calculator"}, started_at=at(1)),
        Step(index=2, kind="model_call", status="completed", started_at=at(2)),
        Step(index=3, kind="handoff", status="running", started_at=at(3)),
        Step(index=4, kind="model_call", status="pending"),
    ]

    assert [span.label for span in step_spans(steps)] == [
        "Model call 1 (plan)",
        "Tool: calculator",
        "Model call 2",
        "Handoff",
    ]


def _plan_run_with_executors(world: World) -> tuple[Run, Run, Run]:
    run = world.run_a
    Run.objects.filter(pk=run.pk).update(
        started_at=at(0), finished_at=at(20), input_tokens=100, output_tokens=20
    )
    Step.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        index=0,
        kind="model_call",
        status="completed",
        input={"purpose": "plan"},
        started_at=at(0),
        finished_at=at(4),
        input_tokens=100,
        output_tokens=20,
    )
    children = []
    for number, (start, end, tokens) in enumerate(((4, 12, (50, 5)), (4, 16, (70, 7))), start=1):
        children.append(
            Run.objects.create(
                tenant=run.tenant,
                session=run.session,
                agent=run.agent,
                created_by=run.created_by,
                parent_run=run,
                title=f"s{number}: part {number}",
                status=RunStatus.COMPLETED,
                started_at=at(start),
                finished_at=at(end),
                input_tokens=tokens[0],
                output_tokens=tokens[1],
            )
        )
    return run, children[0], children[1]


def test_the_run_page_draws_the_waterfall_with_links_to_its_executors(
    world: World, client_for: ClientFor
) -> None:
    run, first, second = _plan_run_with_executors(world)

    body = client_for(world.cast.bob).get(f"/runs/{run.pk}/").content.decode()

    rows = re.findall(r'data-kind="(\w+)" data-offset="([\d.]+)" data-width="([\d.]+)"', body)
    assert rows == [
        ("model_call", "0.0", "20.0"),
        ("child_run", "20.0", "40.0"),
        ("child_run", "20.0", "60.0"),
    ]
    assert f'<a href="/runs/{first.pk}/">Executor: s1: part 1</a>' in body
    assert f'<a href="/runs/{second.pk}/" tabindex="-1"><rect' in body
    assert "Model call 1 (plan)" in body
    assert '8.00 s<span class="visually-hidden">, starting 4.00 s into the run</span>' in body
    # Tokens include the executors': 120 own + 55 + 77.
    assert 'data-run-tokens title="252 tokens">252</p>' in body
    assert "with executors and sub-agents · own 120: 100 in · 20 out" in body


def test_a_child_runs_page_shows_its_own_waterfall(world: World, client_for: ClientFor) -> None:
    _, first, _ = _plan_run_with_executors(world)

    response = client_for(world.cast.bob).get(f"/runs/{first.pk}/")

    assert response.status_code == 200
    assert "Nothing has started yet." in response.content.decode()


@pytest.mark.parametrize("fragment", [False, True])
def test_another_tenants_run_page_and_timeline_are_404_and_change_nothing(
    world: World, client_for: ClientFor, fragment: bool
) -> None:
    before = Run.objects.values().get(pk=world.run_b.pk)
    headers = {"HTTP_HX_REQUEST": "true"} if fragment else {}

    response = client_for(world.cast.bob).get(f"/runs/{world.run_b.pk}/", **headers)

    assert response.status_code == 404
    assert "Carol" not in response.content.decode()
    assert Run.objects.values().get(pk=world.run_b.pk) == before


def _finished_plan(world: World) -> tuple[Run, Run, Run]:
    """A plan run whose two executors made priced model calls, finished as the worker finishes it."""
    parent = finished_conversation(world.session_a, question="Plan it", answer="Both parts done.")
    Run.objects.filter(pk=parent.pk).update(
        status=RunStatus.EXECUTING, input_tokens=100, output_tokens=20, model_calls=1, cost_micros=1500
    )
    children = []
    for number, (tokens, micros) in enumerate((((50, 5), 700), ((70, 7), 900)), start=1):
        children.append(
            Run.objects.create(
                tenant=parent.tenant,
                session=parent.session,
                agent=parent.agent,
                created_by=parent.created_by,
                parent_run=parent,
                title=f"s{number}: part {number}",
                status=RunStatus.COMPLETED,
                input_tokens=tokens[0],
                output_tokens=tokens[1],
                model_calls=1,
                cost_micros=micros,
            )
        )
    parent.refresh_from_db()
    run_finish(parent, status=RunStatus.COMPLETED, stop_reason="end_turn")
    return parent, children[0], children[1]


def test_a_plans_totals_include_its_executors_in_the_chat_and_on_its_run_page(
    world: World, client_for: ClientFor
) -> None:
    parent, first, second = _finished_plan(world)
    client = client_for(world.cast.bob)

    chat = client.get(f"/chat/{world.session_a.pk}/").content.decode()
    run_page = client.get(f"/runs/{parent.pk}/").content.decode()

    answer = chat[chat.index(f'id="run-{parent.pk}"') : chat.index("<template")]
    footer = answer[answer.rindex("<footer") :]
    # 120 own + 55 + 77 tokens; 1500 + 700 + 900 micro-credits.
    assert re.search(
        r'data-slot="usage">252 tokens</span>\s*<span class="small muted" data-slot="cost">\$0\.0031<', footer
    )
    assert 'data-slot="usage">55 tokens · $0.0007</span>' in answer
    assert 'data-slot="usage">77 tokens · $0.0009</span>' in answer
    assert f'<a class="small" href="/runs/{first.pk}/">Timeline</a>' in answer
    assert f'<a class="small" href="/runs/{second.pk}/">Timeline</a>' in answer
    assert 'data-run-tokens title="252 tokens">252</p>' in run_page
    assert '<p class="stat-value stat-small" data-run-cost>$0.0031</p>' in run_page
    assert "with executors and sub-agents · own $0.0015" in run_page
