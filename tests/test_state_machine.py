"""The run and step state machines (sessions.state) and how events are numbered and batched."""

import threading
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from agents.model_clients import ProviderAccess, provider_access
from agents.models import PlanningMode
from agents.runtime.types import ChatMessage, ToolCallRequested, ToolOutcome, Usage
from memory.models import MemoryStatus
from sessions import one_statement
from sessions.approvals import ToolCallGate
from sessions.events import emit_event, events_batched, flush_batched_events
from sessions.execution import run_finish
from sessions.lane import ClaimHint, claim_hint_for, run_claim
from sessions.models import Message, Run, RunEvent, RunStatus, Session, Step, StepStatus
from sessions.recorder import DjangoRunRecorder
from sessions.run_host import RunHandle, new_lease_owner
from sessions.state import (
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    TERMINAL_RUN_STATUSES,
    InvalidTransition,
    StaleAnswer,
    StaleTransition,
    run_transition,
    step_transition,
)
from tenants.models import ProviderKey
from tests.conftest import Cast
from tests.factories import field_values, make_agent
from tests.memory.factories import make_memory
from tools.policy import Decision
from tools.registry import RunToolset

S = RunStatus
ALLOWED_RUN_MOVES = [(source, target) for source, targets in RUN_TRANSITIONS.items() for target in targets]
ALLOWED_STEP_MOVES = [(source, target) for source, targets in STEP_TRANSITIONS.items() for target in targets]
FORBIDDEN_RUN_MOVES = [
    (S.QUEUED, S.EXECUTING),
    (S.QUEUED, S.COMPLETED),
    (S.CREATED, S.EXECUTING),
    (S.EXECUTING, S.PLANNING),
    (S.CANCELLING, S.COMPLETED),
    (S.AWAITING_APPROVAL, S.COMPLETED),
    (S.COMPLETED, S.QUEUED),
    (S.FAILED, S.EXECUTING),
    (S.CANCELLED, S.QUEUED),
    (S.TIMEOUT, S.COMPLETED),
]


def make_session(cast: Cast, **agent_fields: Any) -> Session:
    agent = make_agent(tenant=cast.tenant_a, **agent_fields)
    return Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)


def make_run(session: Session, status: str = S.QUEUED, **fields: Any) -> Run:
    config = {"planning_mode": session.agent.planning_mode, **fields.pop("agent_config", {})}
    return Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=session.agent,
        created_by=session.created_by,
        status=status,
        agent_config=config,
        **fields,
    )


def session_events(session: Session) -> list[tuple[int, str, dict[str, Any]]]:
    return list(RunEvent.objects.filter(session=session).order_by("seq").values_list("seq", "type", "data"))


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), ALLOWED_RUN_MOVES)
def test_every_allowed_run_transition_moves_bumps_the_version_and_is_audited(
    cast: Cast, source: str, target: str
) -> None:
    session = make_session(cast)
    run = make_run(session, status=source)

    run_transition(run, target, actor="tester")

    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.version, run.status, run.version) == (target, 1, target, 1)
    assert session_events(session) == [(1, "run.status", {"from": source, "to": target, "actor": "tester"})]
    assert (stored.finished_at is not None) == (target in TERMINAL_RUN_STATUSES)


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), FORBIDDEN_RUN_MOVES)
def test_forbidden_run_transitions_raise_and_change_nothing(cast: Cast, source: str, target: str) -> None:
    session = make_session(cast)
    run = make_run(session, status=source)

    with pytest.raises(InvalidTransition):
        run_transition(run, target)

    assert Run.objects.filter(pk=run.pk).values_list("status", "version").get() == (source, 0)
    assert session_events(session) == []


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), ALLOWED_STEP_MOVES)
def test_every_allowed_step_transition_moves_and_bumps_the_version(
    cast: Cast, source: str, target: str
) -> None:
    run = make_run(make_session(cast), status=S.EXECUTING)
    step = Step.objects.create(run=run, index=0, kind="model_call", status=source)

    step_transition(step, target)

    assert Step.objects.filter(pk=step.pk).values_list("status", "version").get() == (target, 1)


@pytest.mark.django_db
@pytest.mark.parametrize("source", [StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED])
def test_finished_steps_do_not_move(cast: Cast, source: str) -> None:
    run = make_run(make_session(cast), status=S.EXECUTING)
    step = Step.objects.create(run=run, index=0, kind="model_call", status=source)

    with pytest.raises(InvalidTransition):
        step_transition(step, StepStatus.RUNNING)

    assert Step.objects.filter(pk=step.pk).values_list("status", "version").get() == (source, 0)


@pytest.mark.django_db
def test_a_terminal_run_cancels_its_open_steps_and_leaves_finished_ones(cast: Cast) -> None:
    run = make_run(make_session(cast), status=S.EXECUTING)
    for index, status in enumerate([StepStatus.COMPLETED, StepStatus.RUNNING, StepStatus.PENDING]):
        Step.objects.create(run=run, index=index, kind="tool_call", status=status)

    run_transition(run, S.CANCELLED, stop_reason="cancelled")

    assert list(run.steps.order_by("index").values_list("status", flat=True)) == [
        StepStatus.COMPLETED,
        StepStatus.CANCELLED,
        StepStatus.CANCELLED,
    ]


@pytest.mark.django_db
def test_finishing_a_run_cancels_its_open_steps_and_audits_the_move_then_the_end(cast: Cast) -> None:
    """run_finish is one statement on PostgreSQL and run_transition on SQLite: the same outcome."""
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING, input_tokens=7, output_tokens=3)
    for index, status in enumerate([StepStatus.COMPLETED, StepStatus.RUNNING, StepStatus.PENDING]):
        Step.objects.create(run=run, index=index, kind="tool_call", status=status)

    finished = run_finish(run, status=S.FAILED, stop_reason="llm_error", error="boom")

    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.stop_reason, stored.error, stored.version) == (
        S.FAILED,
        "llm_error",
        "boom",
        1,
    )
    assert (stored.lease_owner, stored.lease_expires_at) == ("", None) and stored.finished_at is not None
    assert (finished.status, finished.version, finished.finished_at) == (S.FAILED, 1, stored.finished_at)
    assert list(run.steps.order_by("index").values_list("status", flat=True)) == [
        StepStatus.COMPLETED,
        StepStatus.CANCELLED,
        StepStatus.CANCELLED,
    ]
    usage = {"input_tokens": 7, "output_tokens": 3, "cache_read_tokens": 0, "cache_write_tokens": 0}
    assert session_events(session) == [
        (
            1,
            "run.status",
            {"from": S.EXECUTING, "to": S.FAILED, "actor": "system", "stop_reason": "llm_error"},
        ),
        (
            2,
            "run.failed",
            {
                "status": S.FAILED,
                "stop_reason": "llm_error",
                "usage": {**usage, "total_tokens": 10},
                "error": "boom",
            },
        ),
    ]


@pytest.mark.django_db
def test_steps_started_in_a_batch_are_stored_with_its_events(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)

    with CaptureQueriesContext(connection) as writes, recorder.batch():
        first = recorder.start_step(kind="tool_call", input={"tool_call_id": "a"})
        second = recorder.start_step(kind="tool_call", input={"tool_call_id": "b"})
        recorder.emit("tool.call", {"tool_call_id": "a", "name": "calculator", "arguments": {}})

    steps = list(Step.objects.filter(run=run).order_by("index").values_list("id", "index", "status"))
    assert steps == [(uuid.UUID(first), 0, StepStatus.RUNNING), (uuid.UUID(second), 1, StepStatus.RUNNING)]
    assert [event_type for _seq, event_type, _data in session_events(session)] == [
        "step.started",
        "step.started",
        "tool.call",
    ]
    # PostgreSQL: the rows and their events in one statement; SQLite: each step, then the events.
    assert len(writes) == (1 if connection.vendor == "postgresql" else 4)


@pytest.mark.django_db
def test_a_step_started_in_a_batch_that_raises_is_still_stored_with_its_event(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)

    with pytest.raises(RuntimeError, match="boom"), recorder.batch():
        step_id = recorder.start_step(kind="model_call", input={})
        raise RuntimeError("boom")

    assert Step.objects.filter(pk=step_id, status=StepStatus.RUNNING).count() == 1
    assert [event_type for _seq, event_type, _data in session_events(session)] == ["step.started"]


@pytest.mark.django_db
def test_a_worker_finishing_its_current_run_announces_the_totals_its_recorder_kept(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    for tokens in (3, 4):
        with recorder.batch():
            step_id = recorder.start_step(kind="model_call", input={})
        recorder.complete_step(step_id, output={}, usage=Usage(input_tokens=tokens, output_tokens=1))

    run_finish(run, status=S.COMPLETED, stop_reason="end_turn", is_current=True)

    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.input_tokens, stored.output_tokens, stored.model_calls) == (
        S.COMPLETED,
        7,
        2,
        2,
    )
    completed = [data for _seq, event_type, data in session_events(session) if event_type == "run.completed"]
    assert [data["usage"]["total_tokens"] for data in completed] == [9]


@pytest.mark.django_db
def test_a_worker_finishing_a_run_cancelled_meanwhile_ends_it_cancelled(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    run_transition(Run.objects.get(pk=run.pk), S.CANCELLING, actor="user:1")  # the copy in memory is stale

    run_finish(run, status=S.COMPLETED, stop_reason="end_turn", is_current=True)

    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.stop_reason, stored.version) == (S.CANCELLED, "cancelled", 2)
    assert [event_type for _seq, event_type, _data in session_events(session)] == [
        "run.status",
        "run.status",
        "run.cancelled",
    ]


def _a_model_step_someone_else_moved(cast: Cast) -> tuple[Session, Run, DjangoRunRecorder, str]:
    """A running run's recorder, holding a model step whose stored version moved on."""
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    step_id = recorder.start_step(kind="model_call", input={})
    Step.objects.filter(pk=step_id).update(version=F("version") + 1)
    return session, run, recorder, step_id


@pytest.mark.django_db
def test_a_stale_step_completion_writes_nothing(cast: Cast) -> None:
    session, run, recorder, step_id = _a_model_step_someone_else_moved(cast)
    events_before = session_events(session)

    with events_batched(), pytest.raises(StaleTransition):
        recorder.complete_step(step_id, output={"content": []}, usage=Usage(input_tokens=5, output_tokens=1))

    assert Step.objects.filter(pk=step_id).values_list("status", "input_tokens").get() == (
        StepStatus.RUNNING,
        0,
    )
    assert Run.objects.filter(pk=run.pk).values_list("input_tokens", "model_calls").get() == (0, 0)
    assert session_events(session) == events_before


def _answer_in_one_batch(recorder: DjangoRunRecorder, step_id: str, usage: Usage) -> None:
    """What the loop does when a model call ends: the step's end and the answer in one batch
    (one statement on PostgreSQL)."""
    with recorder.batch():
        recorder.emit("message.completed", {"content": [{"type": "text", "text": "Hi."}]})
        recorder.complete_step(step_id, output={"content": [], "stop_reason": "end_turn"}, usage=usage)
        with recorder.batch():
            recorder.emit("usage", {"usage": usage.as_dict()})
            answer = ChatMessage(role="assistant", content=[{"type": "text", "text": "Hi."}])
            recorder.append_message(answer, usage=usage)


@pytest.mark.django_db
def test_a_model_call_ends_with_its_answer_on_either_database(cast: Cast) -> None:
    session = make_session(cast)
    Session.objects.filter(pk=session.pk).update(last_message_position=3)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    with recorder.batch():
        step_id = recorder.start_step(kind="model_call", input={})
    seq_before = session_events(session)[-1][0]

    _answer_in_one_batch(recorder, step_id, Usage(input_tokens=5, output_tokens=2))

    assert Step.objects.filter(pk=step_id).values_list(
        "status", "version", "input_tokens", "output_tokens"
    ).get() == (
        StepStatus.COMPLETED,
        1,
        5,
        2,
    )
    stored_run = (
        Run.objects.filter(pk=run.pk).values_list("input_tokens", "output_tokens", "model_calls").get()
    )
    assert stored_run == (5, 2, 1)
    assert (run.input_tokens, run.output_tokens, run.model_calls) == (5, 2, 1)  # the recorder's copy agrees
    assert list(
        Message.objects.filter(run=run).values_list("position", "role", "content", "output_tokens")
    ) == [(4, "assistant", [{"type": "text", "text": "Hi."}], 2)]
    later = [(seq - seq_before, event_type) for seq, event_type, _data in session_events(session)]
    assert [entry for entry in later if entry[0] > 0] == [
        (1, "message.completed"),
        (2, "step.completed"),
        (3, "usage"),
    ]


@pytest.mark.django_db
def test_a_model_call_ending_in_a_batch_that_also_fails_a_step_stores_both_in_order(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    with recorder.batch():
        model_step = recorder.start_step(kind="model_call", input={})
        tool_step = recorder.start_step(kind="tool_call", input={"tool_call_id": "call-1"})
    seq_before = session_events(session)[-1][0]

    with recorder.batch():
        recorder.complete_step(
            model_step, output={"content": []}, usage=Usage(input_tokens=3, output_tokens=1)
        )
        recorder.fail_step(tool_step, error="boom")

    statuses = dict(Step.objects.filter(run=run).values_list("id", "status"))
    assert (statuses[uuid.UUID(model_step)], statuses[uuid.UUID(tool_step)]) == (
        StepStatus.COMPLETED,
        StepStatus.FAILED,
    )
    assert Run.objects.filter(pk=run.pk).values_list("input_tokens", "model_calls").get() == (3, 1)
    later = [
        (seq - seq_before, data["step_id"])
        for seq, _type, data in session_events(session)
        if seq > seq_before
    ]
    assert later == [(1, model_step), (2, tool_step)]


@pytest.mark.django_db
def test_a_stale_step_completion_with_its_answer_writes_neither(cast: Cast) -> None:
    session, run, recorder, step_id = _a_model_step_someone_else_moved(cast)
    events_before = session_events(session)

    with pytest.raises(StaleTransition):
        _answer_in_one_batch(recorder, step_id, Usage(input_tokens=5, output_tokens=1))

    assert Step.objects.filter(pk=step_id).values_list("status", "input_tokens").get() == (
        StepStatus.RUNNING,
        0,
    )
    assert Run.objects.filter(pk=run.pk).values_list("input_tokens", "model_calls").get() == (0, 0)
    assert (run.input_tokens, run.model_calls) == (0, 0)
    assert not Message.objects.filter(run=run).exists()
    # Neither the step's end nor the answer's usage is announced. (SQLite's ORM path keeps
    # the batch's earlier events after a failure; PostgreSQL's statement held them and wrote nothing.)
    later_types = [event_type for _seq, event_type, _data in session_events(session)[len(events_before) :]]
    assert [event_type for event_type in later_types if event_type in ("step.completed", "usage")] == []


@pytest.mark.django_db(transaction=True)
def test_a_message_appended_in_a_batch_is_stored_with_the_batchs_steps(cast: Cast) -> None:
    session = make_session(cast)
    Session.objects.filter(pk=session.pk).update(last_message_position=2)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    results = ChatMessage(
        role="user", content=[{"type": "tool_result", "tool_call_id": "c1", "content": "42"}]
    )
    seq_before = session_events(session)[-1][0] if session_events(session) else 0

    with CaptureQueriesContext(connection) as queries, recorder.batch():
        recorder.append_message(results)
        step_id = recorder.start_step(kind="model_call", input={})
        recorder.emit("message.started", {"role": "assistant"})

    assert list(Message.objects.filter(run=run).values_list("position", "role")) == [(3, "tool")]
    assert Step.objects.filter(pk=step_id).values_list("status", flat=True).get() == StepStatus.RUNNING
    assert _types_after(session, seq_before) == ["step.started", "message.started"]
    if connection.vendor == "postgresql":  # two statements, one round trip (BEGIN and COMMIT ride along)
        assert len(queries) == 2


def _a_run_holding_its_last_answer(cast: Cast) -> tuple[Session, Run, DjangoRunRecorder, str]:
    """A running run whose recorder holds its last answer back, as the loop leaves it."""
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    recorder.holds_writes = True
    with recorder.batch():
        step_id = recorder.start_step(kind="model_call", input={})
    _answer_in_one_batch(recorder, step_id, Usage(input_tokens=5, output_tokens=2))
    return session, run, recorder, step_id


def _finish_with_the_held_answer(run: Run, recorder: DjangoRunRecorder) -> None:
    """What the worker does when its loop ends with an answer: the run completes with it."""
    run_finish(
        run, status=S.COMPLETED, stop_reason="end_turn", is_current=True, answer=recorder.take_held_answer()
    )


def _types_after(session: Session, seq: int) -> list[str]:
    return [event_type for event_seq, event_type, _data in session_events(session) if event_seq > seq]


@pytest.mark.django_db(transaction=True)
def test_the_last_answer_is_stored_with_the_runs_end(cast: Cast, monkeypatch: pytest.MonkeyPatch) -> None:
    session, run, recorder, step_id = _a_run_holding_its_last_answer(cast)
    held = not Message.objects.filter(run=run).exists()
    seq_before = session_events(session)[-1][0]
    announced: list[list[str]] = []
    monkeypatch.setattr(
        "sessions.events.publish", lambda _group, envelopes: announced.append([e["type"] for e in envelopes])
    )

    with CaptureQueriesContext(connection) as queries:
        _finish_with_the_held_answer(run, recorder)

    # PostgreSQL held the answer back and wrote it with the end: two statements, one round trip.
    # SQLite stored it at once (and ends runs through the ORM).
    assert held is (connection.vendor == "postgresql")
    if connection.vendor == "postgresql":
        assert len(queries) == 2
    assert Step.objects.filter(pk=step_id).values_list("status", "input_tokens").get() == (
        StepStatus.COMPLETED,
        5,
    )
    assert Run.objects.filter(pk=run.pk).values_list("status", "input_tokens", "model_calls").get() == (
        S.COMPLETED,
        5,
        1,
    )
    assert list(Message.objects.filter(run=run).values_list("role", "output_tokens")) == [("assistant", 2)]
    seqs = [seq for seq, _type, _data in session_events(session)]
    assert seqs == list(range(1, len(seqs) + 1))
    finishing = ["run.status", "run.completed"]
    answering = ["message.completed", "step.completed", "usage"]
    assert _types_after(session, seq_before) == (
        answering + finishing if connection.vendor == "postgresql" else finishing
    )
    # Announced together: the end does not wait behind the answer on the channel layer.
    assert announced == [_types_after(session, seq_before)]
    completed = [data for _seq, event_type, data in session_events(session) if event_type == "run.completed"]
    assert completed[0]["usage"]["total_tokens"] == 7


@pytest.mark.django_db
def test_a_held_answer_is_stored_before_whatever_the_recorder_writes_next(cast: Cast) -> None:
    session, run, recorder, _step_id = _a_run_holding_its_last_answer(cast)
    seq_before = session_events(session)[-1][0]

    recorder.emit("text.delta", {"text": "after"})

    later = ["text.delta"]
    if connection.vendor == "postgresql":
        later = ["message.completed", "step.completed", "usage", *later]
    assert _types_after(session, seq_before) == later
    assert Message.objects.filter(run=run).count() == 1
    assert recorder.take_held_answer() is None


def _start_the_tool_calls(
    recorder: DjangoRunRecorder, call_ids: list[str], *, may_hold: bool = False
) -> list[str]:
    """What ``run_tool_calls`` does: the batch's steps and their tool.call events.

    ``may_hold``: the calls are read-only (the recorder may store their starts with their ends).
    """
    with recorder.batch():
        step_ids = [
            recorder.start_step(
                kind="tool_call", input={"tool_call_id": call_id, "name": "calculator"}, may_hold=may_hold
            )
            for call_id in call_ids
        ]
        for call_id in call_ids:
            recorder.emit("tool.call", {"tool_call_id": call_id, "name": "calculator", "arguments": {}})
    return step_ids


@pytest.fixture
def announced(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The event types of each announcement made by the one-statement writes (PostgreSQL): the
    events of one announcement were stored by one round trip."""
    announcements: list[list[str]] = []
    original = one_statement.announce_on_commit

    def announce(session_id: Any, events: list[Any], sequence_numbers: list[int]) -> None:
        announcements.append([event.type for event in events])
        original(session_id, events, sequence_numbers)

    monkeypatch.setattr(one_statement, "announce_on_commit", announce)
    return announcements


@pytest.mark.django_db(transaction=True)
def test_a_held_answer_is_stored_with_the_tool_steps_it_starts(
    cast: Cast, announced: list[list[str]]
) -> None:
    session, run, recorder, step_id = _a_run_holding_its_last_answer(cast)
    held = not Message.objects.filter(run=run).exists()
    seq_before = session_events(session)[-1][0]
    announced.clear()

    with CaptureQueriesContext(connection) as queries:
        tool_step_ids = _start_the_tool_calls(recorder, ["c1", "c2"])

    answering = ["message.completed", "step.completed", "usage"]
    starting = ["step.started", "step.started", "tool.call", "tool.call"]
    assert held is (connection.vendor == "postgresql")
    if connection.vendor == "postgresql":  # two statements in one round trip, announced together
        assert len(queries) == 2
        assert announced == [answering + starting]
        assert _types_after(session, seq_before) == answering + starting
    else:
        assert _types_after(session, seq_before) == starting
    assert Step.objects.filter(pk=step_id).values_list("status", flat=True).get() == StepStatus.COMPLETED
    assert list(
        Step.objects.filter(pk__in=tool_step_ids).order_by("index").values_list("index", "status")
    ) == [
        (1, StepStatus.RUNNING),
        (2, StepStatus.RUNNING),
    ]
    assert Message.objects.filter(run=run).count() == 1
    assert Run.objects.filter(pk=run.pk).values_list("input_tokens", "model_calls").get() == (5, 1)
    assert (run.input_tokens, run.model_calls) == (5, 1)
    seqs = [seq for seq, _type, _data in session_events(session)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert recorder.take_held_answer() is None


def _assert_nothing_written_after_the_model_calls_start(
    session: Session, run: Run, events_before: list[tuple[int, str, dict[str, Any]]]
) -> None:
    """A stale held answer: neither it nor anything stored with it was written."""
    assert list(Step.objects.filter(run=run).values_list("kind", "status")) == [
        ("model_call", StepStatus.RUNNING)
    ]
    assert not Message.objects.filter(run=run).exists()
    assert session_events(session) == events_before


@pytest.mark.skipif(connection.vendor != "postgresql", reason="answers are held back on PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_held_answer_whose_step_went_stale_starts_no_tool_steps(cast: Cast) -> None:
    session, run, recorder, step_id = _a_run_holding_its_last_answer(cast)
    Step.objects.filter(pk=step_id).update(version=F("version") + 1)
    events_before = session_events(session)

    with pytest.raises(StaleAnswer):
        _start_the_tool_calls(recorder, ["c1"])

    _assert_nothing_written_after_the_model_calls_start(session, run, events_before)


@pytest.mark.django_db
def test_a_held_answer_is_stored_before_the_approval_it_asks_for(cast: Cast) -> None:
    session, run, recorder, _step_id = _a_run_holding_its_last_answer(cast)
    seq_before = session_events(session)[-1][0]
    toolset = RunToolset(
        tools={},
        decisions={"calculator": Decision(is_allowed=True, reason="", requires_approval=True)},
        max_calls_per_turn=8,
        max_calls_per_run=8,
        is_owner_run=True,
    )
    gate = ToolCallGate(run, toolset, before_writing=recorder.store_held_writes)

    checks = gate.check([ToolCallRequested(id="c1", name="calculator", arguments={"expression": "1+1"})])

    assert checks["c1"].state == "pending"
    answering = ["message.completed", "step.completed", "usage"] if connection.vendor == "postgresql" else []
    assert _types_after(session, seq_before) == [*answering, "approval.required"]
    assert Message.objects.filter(run=run).count() == 1


def _a_run_running_tool_calls(
    cast: Cast, call_ids: list[str]
) -> tuple[Session, Run, DjangoRunRecorder, list[str]]:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    recorder.holds_writes = True
    return session, run, recorder, _start_the_tool_calls(recorder, call_ids)


def _record_tool_result(recorder: DjangoRunRecorder, step_id: str, call_id: str) -> None:
    """What ``tool_execution._record_result`` does when a call finishes."""
    with recorder.batch():
        recorder.emit("tool.result", {"tool_call_id": call_id, "name": "calculator", "content": "2"})
        recorder.complete_step(step_id, output={"content": "2", "is_error": False})


def _start_the_next_model_call(recorder: DjangoRunRecorder, call_ids: list[str]) -> str:
    """What the loop does next: the results message joins the transcript with the call's start."""
    results = ChatMessage(
        role="user",
        content=[{"type": "tool_result", "tool_call_id": call_id, "content": "2"} for call_id in call_ids],
    )
    with recorder.batch():
        recorder.append_message(results)
        step_id = recorder.start_step(kind="model_call", input={})
        recorder.emit("message.started", {"role": "assistant"})
    return step_id


@pytest.mark.django_db(transaction=True)
def test_the_last_tool_calls_end_is_stored_with_the_results_and_the_next_model_call(
    cast: Cast, announced: list[list[str]]
) -> None:
    session, run, recorder, tool_step_ids = _a_run_running_tool_calls(cast, ["c1", "c2"])
    seq_before = session_events(session)[-1][0]

    with CaptureQueriesContext(connection) as first_queries:
        _record_tool_result(recorder, tool_step_ids[0], "c1")
    with CaptureQueriesContext(connection) as last_queries:
        _record_tool_result(recorder, tool_step_ids[1], "c2")
    last_held = Step.objects.filter(pk=tool_step_ids[1]).values_list("status", flat=True).get()
    announced.clear()
    with CaptureQueriesContext(connection) as next_queries:
        model_step_id = _start_the_next_model_call(recorder, ["c1", "c2"])

    # The first call's end is stored at once (the other call still ran); the last one's waits
    # for the results message and the next call's start: three statements in one round trip.
    if connection.vendor == "postgresql":
        assert (len(first_queries), len(last_queries), len(next_queries)) == (1, 0, 3)
        assert last_held == StepStatus.RUNNING
        assert announced == [["tool.result", "step.completed", "step.started", "message.started"]]
    assert list(Step.objects.filter(run=run).order_by("index").values_list("kind", "status")) == [
        ("tool_call", StepStatus.COMPLETED),
        ("tool_call", StepStatus.COMPLETED),
        ("model_call", StepStatus.RUNNING),
    ]
    assert str(Step.objects.get(run=run, index=2).pk) == model_step_id
    assert list(Message.objects.filter(run=run).values_list("role", flat=True)) == ["tool"]
    assert recorder.completed_tool_result("c2") == ToolOutcome(content="2", is_error=False)
    assert _types_after(session, seq_before) == [
        *("tool.result", "step.completed", "tool.result", "step.completed"),
        *("step.started", "message.started"),
    ]
    seqs = [seq for seq, _type, _data in session_events(session)]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.skipif(connection.vendor != "postgresql", reason="tool ends are held back on PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_held_tool_end_whose_step_went_stale_stores_no_results_and_no_next_call(cast: Cast) -> None:
    session, run, recorder, tool_step_ids = _a_run_running_tool_calls(cast, ["c1"])
    _record_tool_result(recorder, tool_step_ids[0], "c1")
    Step.objects.filter(pk=tool_step_ids[0]).update(version=F("version") + 1)
    events_before = session_events(session)

    with pytest.raises(StaleTransition):
        _start_the_next_model_call(recorder, ["c1"])

    assert list(Step.objects.filter(run=run).values_list("kind", "status")) == [
        ("tool_call", StepStatus.RUNNING)
    ]
    assert not Message.objects.filter(run=run).exists()
    assert session_events(session) == events_before


@pytest.mark.django_db
def test_a_held_tool_end_is_stored_before_the_runs_end(cast: Cast) -> None:
    session, run, recorder, tool_step_ids = _a_run_running_tool_calls(cast, ["c1"])
    _record_tool_result(recorder, tool_step_ids[0], "c1")
    seq_before = session_events(session)[-1][0]

    run_finish(
        run, status=S.FAILED, stop_reason="max_steps", is_current=True, answer=recorder.take_held_answer()
    )

    assert (
        Step.objects.filter(pk=tool_step_ids[0]).values_list("status", flat=True).get()
        == StepStatus.COMPLETED
    )
    held_types = ["tool.result", "step.completed"] if connection.vendor == "postgresql" else []
    assert _types_after(session, seq_before) == [*held_types, "run.status", "run.failed"]


ANSWERING = ["message.completed", "step.completed", "usage"]
STARTING_TWO_CALLS = ["step.started", "step.started", "tool.call", "tool.call"]
ENDING_TWO_CALLS = ["tool.result", "step.completed", "tool.result", "step.completed"]
NEXT_MODEL_CALL = ["step.started", "message.started"]


@pytest.mark.django_db(transaction=True)
def test_read_only_calls_that_end_quickly_are_stored_started_and_ended_with_the_next_model_call(
    cast: Cast, announced: list[list[str]]
) -> None:
    session, run, recorder, answer_step_id = _a_run_holding_its_last_answer(cast)
    seq_before = session_events(session)[-1][0]
    announced.clear()

    with CaptureQueriesContext(connection) as held_queries:
        tool_step_ids = _start_the_tool_calls(recorder, ["c1", "c2"], may_hold=True)
        _record_tool_result(recorder, tool_step_ids[0], "c1")
        _record_tool_result(recorder, tool_step_ids[1], "c2")
    stored_while_held = Step.objects.filter(run=run).count()
    with CaptureQueriesContext(connection) as next_queries:
        model_step_id = _start_the_next_model_call(recorder, ["c1", "c2"])

    # PostgreSQL: nothing is written until the next model call starts; then the answer, the
    # results message and the four steps: three statements in one round trip, announced together.
    if connection.vendor == "postgresql":
        assert (len(held_queries), stored_while_held, len(next_queries)) == (0, 1, 3)
        assert announced == [ANSWERING + STARTING_TWO_CALLS + ENDING_TWO_CALLS + NEXT_MODEL_CALL]
    assert _types_after(session, seq_before) == (
        (ANSWERING if connection.vendor == "postgresql" else [])
        + STARTING_TWO_CALLS
        + ENDING_TWO_CALLS
        + NEXT_MODEL_CALL
    )
    steps = list(
        Step.objects.filter(run=run)
        .order_by("index")
        .values_list("pk", "kind", "status", "version", "output", "started_at", "finished_at")
    )
    assert [(str(pk), kind, status, version) for pk, kind, status, version, *_rest in steps] == [
        (answer_step_id, "model_call", StepStatus.COMPLETED, 1),
        (tool_step_ids[0], "tool_call", StepStatus.COMPLETED, 1),
        (tool_step_ids[1], "tool_call", StepStatus.COMPLETED, 1),
        (model_step_id, "model_call", StepStatus.RUNNING, 0),
    ]
    for _pk, _kind, _status, _version, output, started_at, finished_at in steps[1:3]:
        assert output == {"content": "2", "is_error": False}
        assert started_at is not None and finished_at is not None and started_at < finished_at
    assert list(Message.objects.filter(run=run).order_by("position").values_list("role", flat=True)) == [
        "assistant",
        "tool",
    ]
    assert Run.objects.filter(pk=run.pk).values_list("input_tokens", "model_calls").get() == (5, 1)
    assert recorder.completed_tool_result("c1") == ToolOutcome(content="2", is_error=False)
    seqs = [seq for seq, _type, _data in session_events(session)]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.django_db(transaction=True)
def test_held_starts_are_stored_when_the_loop_stops_waiting_for_their_ends(
    cast: Cast, announced: list[list[str]]
) -> None:
    session, run, recorder, _answer_step_id = _a_run_holding_its_last_answer(cast)
    seq_before = session_events(session)[-1][0]
    tool_step_ids = _start_the_tool_calls(recorder, ["c1", "c2"], may_hold=True)
    _record_tool_result(recorder, tool_step_ids[0], "c1")  # c2 is slow
    announced.clear()

    with CaptureQueriesContext(connection) as queries:
        recorder.store_held_writes()

    # Watchers now see both calls, the quick one ended; the slow one goes on as usual.
    if connection.vendor == "postgresql":
        assert len(queries) == 2
        assert announced == [ANSWERING + STARTING_TWO_CALLS + ENDING_TWO_CALLS[:2]]
    assert list(Step.objects.filter(run=run).order_by("index").values_list("kind", "status")) == [
        ("model_call", StepStatus.COMPLETED),
        ("tool_call", StepStatus.COMPLETED),
        ("tool_call", StepStatus.RUNNING),
    ]
    _record_tool_result(recorder, tool_step_ids[1], "c2")
    _start_the_next_model_call(recorder, ["c1", "c2"])
    assert _types_after(session, seq_before) == (
        (ANSWERING if connection.vendor == "postgresql" else [])
        + STARTING_TWO_CALLS
        + ENDING_TWO_CALLS
        + NEXT_MODEL_CALL
    )
    assert list(Step.objects.filter(run=run).order_by("index").values_list("status", flat=True)) == [
        StepStatus.COMPLETED,
        StepStatus.COMPLETED,
        StepStatus.COMPLETED,
        StepStatus.RUNNING,
    ]
    seqs = [seq for seq, _type, _data in session_events(session)]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.django_db
def test_held_calls_are_stored_before_the_results_and_the_runs_end(cast: Cast) -> None:
    session, run, recorder, _answer_step_id = _a_run_holding_its_last_answer(cast)
    seq_before = session_events(session)[-1][0]
    [tool_step_id] = _start_the_tool_calls(recorder, ["c1"], may_hold=True)
    _record_tool_result(recorder, tool_step_id, "c1")
    results = ChatMessage(
        role="user", content=[{"type": "tool_result", "tool_call_id": "c1", "content": "2"}]
    )

    # The loop stops before another model call (max_steps): its results join the transcript alone.
    recorder.append_message(results)
    run_finish(
        run, status=S.COMPLETED, stop_reason="max_steps", is_current=True, answer=recorder.take_held_answer()
    )

    assert _types_after(session, seq_before) == (
        (ANSWERING if connection.vendor == "postgresql" else [])
        + ["step.started", "tool.call", "tool.result", "step.completed", "run.status", "run.completed"]
    )
    assert list(Step.objects.filter(run=run).order_by("index").values_list("kind", "status")) == [
        ("model_call", StepStatus.COMPLETED),
        ("tool_call", StepStatus.COMPLETED),
    ]
    assert list(Message.objects.filter(run=run).order_by("position").values_list("role", flat=True)) == [
        "assistant",
        "tool",
    ]
    assert Run.objects.filter(pk=run.pk).values_list("status", "input_tokens").get() == (S.COMPLETED, 5)


@pytest.mark.skipif(connection.vendor != "postgresql", reason="answers are held back on PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_held_calls_of_an_answer_whose_step_went_stale_store_nothing(cast: Cast) -> None:
    session, run, recorder, answer_step_id = _a_run_holding_its_last_answer(cast)
    [tool_step_id] = _start_the_tool_calls(recorder, ["c1"], may_hold=True)
    _record_tool_result(recorder, tool_step_id, "c1")
    Step.objects.filter(pk=answer_step_id).update(version=F("version") + 1)
    events_before = session_events(session)

    with pytest.raises(StaleAnswer):
        _start_the_next_model_call(recorder, ["c1"])

    _assert_nothing_written_after_the_model_calls_start(session, run, events_before)


@pytest.mark.django_db
def test_a_held_answer_of_a_run_cancelled_meanwhile_is_stored_and_the_run_ends_cancelled(cast: Cast) -> None:
    session, run, recorder, step_id = _a_run_holding_its_last_answer(cast)
    seq_before = session_events(session)[-1][0]
    run_transition(Run.objects.get(pk=run.pk), S.CANCELLING, actor="user:1")  # the copy in memory is stale

    _finish_with_the_held_answer(run, recorder)

    assert Run.objects.filter(pk=run.pk).values_list("status", "stop_reason", "input_tokens").get() == (
        S.CANCELLED,
        "cancelled",
        5,
    )
    assert Step.objects.filter(pk=step_id).values_list("status", flat=True).get() == StepStatus.COMPLETED
    assert Message.objects.filter(run=run).count() == 1
    answering = ["message.completed", "step.completed", "usage"] if connection.vendor == "postgresql" else []
    assert _types_after(session, seq_before) == ["run.status", *answering, "run.status", "run.cancelled"]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="answers are held back on PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_held_answer_whose_step_went_stale_writes_nothing_not_even_the_end(cast: Cast) -> None:
    session, run, recorder, step_id = _a_run_holding_its_last_answer(cast)
    Step.objects.filter(pk=step_id).update(version=F("version") + 1)
    events_before = session_events(session)

    with pytest.raises(StaleAnswer):
        _finish_with_the_held_answer(run, recorder)

    assert Step.objects.filter(pk=step_id).values_list("status", flat=True).get() == StepStatus.RUNNING
    assert Run.objects.filter(pk=run.pk).values_list("status", "input_tokens").get() == (S.EXECUTING, 0)
    assert not Message.objects.filter(run=run).exists()
    assert session_events(session) == events_before


@pytest.mark.django_db
def test_a_stale_copy_loses_and_leaves_the_surrounding_transaction_usable(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    stale = Run.objects.get(pk=run.pk)
    run_transition(run, S.CANCELLING)

    with transaction.atomic():
        with pytest.raises(StaleTransition):
            run_transition(stale, S.COMPLETED, stop_reason="end_turn")
        # No savepoint was needed: the losing update wrote nothing, the transaction goes on.
        Message.objects.create(tenant=session.tenant, session=session, role="user", content=[])

    assert Run.objects.filter(pk=run.pk).values_list("status", "version").get() == (S.CANCELLING, 1)
    assert (stale.status, stale.version) == (S.EXECUTING, 0)
    assert [event_type for _seq, event_type, _data in session_events(session)] == ["run.status"]
    assert Message.objects.filter(session=session).count() == 1


@pytest.mark.django_db(transaction=True)
def test_two_workers_racing_for_one_transition_leave_exactly_one_winner(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    copies = [Run.objects.get(pk=run.pk), Run.objects.get(pk=run.pk)]
    outcomes: list[str] = []
    barrier = threading.Barrier(2)

    def finish(copy: Run, target: str) -> None:
        try:
            barrier.wait(timeout=5)
            run_transition(copy, target)
            outcomes.append(f"won:{target}")
        except StaleTransition:
            outcomes.append("lost")
        finally:
            connection.close()

    threads = [
        threading.Thread(target=finish, args=(copies[0], S.COMPLETED)),
        threading.Thread(target=finish, args=(copies[1], S.FAILED)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    assert sorted(outcome.split(":")[0] for outcome in outcomes) == ["lost", "won"]
    winner = next(outcome.split(":")[1] for outcome in outcomes if outcome.startswith("won"))
    assert Run.objects.filter(pk=run.pk).values_list("status", "version").get() == (winner, 1)
    assert [(seq, data["to"]) for seq, _type, data in session_events(session)] == [(1, winner)]


@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_one_run_leave_exactly_one_owner(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session)
    claimed: list[Run | None] = []
    barrier = threading.Barrier(2)

    def claim() -> None:
        try:
            barrier.wait(timeout=5)
            claimed.append(run_claim(run_id=run.pk, owner=new_lease_owner()))
        finally:
            connection.close()

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    winners = [result for result in claimed if result is not None]
    assert (len(claimed), len(winners)) == (2, 1)
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.lease_owner) == (S.EXECUTING, winners[0].lease_owner)


@pytest.mark.django_db
def test_claiming_a_direct_run_starts_it_executing_in_one_transaction(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session)

    claimed = run_claim(run_id=run.pk, owner="worker-1")

    assert claimed is not None
    assert (claimed.status, claimed.attempt, claimed.lease_owner) == (S.EXECUTING, 1, "worker-1")
    assert [(seq, event_type) for seq, event_type, _data in session_events(session)] == [
        (1, "run.status"),
        (2, "run.started"),
        (3, "run.status"),
    ]
    assert [data.get("to") for _seq, _type, data in session_events(session)] == [
        S.PLANNING,
        None,
        S.EXECUTING,
    ]


@pytest.mark.django_db
def test_a_claimed_run_comes_with_the_objects_the_orm_would_load(cast: Cast) -> None:
    """On PostgreSQL the claimed run is read by hand-written SQL: it must equal the ORM's."""
    session = make_session(cast)
    message = Message.objects.create(
        tenant=cast.tenant_a, session=session, role="user", content=[{"type": "text", "text": "hi"}]
    )
    run = make_run(session, user_message=message, agent_config={"model_provider": "anthropic"})
    ProviderKey.objects.create(
        tenant=cast.tenant_a, provider="anthropic", api_key="sk-tenant", base_url="http://models.example"
    )

    claimed = run_claim(run_id=run.pk, owner="worker-1")

    assert claimed is not None
    expected = Run.objects.select_related("tenant", "session", "user_message").get(pk=run.pk)
    assert field_values(claimed) == field_values(expected)
    assert claimed.agent_config == expected.agent_config and claimed.agent_config["model_provider"]
    # SQLite's ORM claim reads the session and the message before it numbers them; the
    # PostgreSQL claim reads everything after its commit.
    stale = (
        {"last_message_position", "last_event_seq", "position"} if connection.vendor == "sqlite" else set()
    )
    for relation in ("tenant", "session", "user_message"):
        loaded, read = (field_values(getattr(run, relation)) for run in (claimed, expected))
        assert {name: value for name, value in loaded.items() if name not in stale} == {
            name: value for name, value in read.items() if name not in stale
        }
    assert claimed.user_message.content == [{"type": "text", "text": "hi"}]
    # PostgreSQL reads the tenant's key for the run's provider with the run; SQLite asks for it.
    with CaptureQueriesContext(connection) as reads:
        access = provider_access(tenant=claimed.tenant, provider="anthropic")
    assert access == ProviderAccess(api_key="sk-tenant", base_url="http://models.example")
    assert len(reads) == (0 if connection.vendor == "postgresql" else 1)


@pytest.mark.django_db
@pytest.mark.parametrize("memory_status", [None, MemoryStatus.ARCHIVED, MemoryStatus.ACTIVE])
def test_a_claimed_run_knows_its_step_count_and_whether_its_agent_has_memories(
    cast: Cast, memory_status: str | None
) -> None:
    """PostgreSQL reads both with the claimed run; the setup then skips those questions."""
    session = make_session(cast)
    if memory_status is not None:
        make_memory(agent=session.agent, content="likes tea", status=memory_status)
    run = make_run(session)
    Step.objects.create(run=run, index=0, kind="model_call", status=StepStatus.COMPLETED)

    claimed = run_claim(run_id=run.pk, owner="worker-1")

    assert claimed is not None
    if connection.vendor != "postgresql":
        assert "prefetched" not in claimed.__dict__  # SQLite's setup asks the database
        return
    has_memories = memory_status == MemoryStatus.ACTIVE
    prefetched = claimed.prefetched
    assert (prefetched.step_count, prefetched.agent_has_active_memories) == (1, has_memories)
    assert (
        DjangoRunRecorder(claimed, handle=RunHandle(claimed.pk, "worker-1"), deadline=None)._next_step_index
        == 1
    )


def _posted_run(session: Session, **fields: Any) -> Run:
    """A run as a post queues it: with its unplaced message and the agent's tool policy."""
    message = Message.objects.create(
        tenant=session.tenant, session=session, role="user", content=[{"type": "text", "text": "hi"}]
    )
    tool_policy = {"assigned_tool_ids": sorted(str(uuid.uuid4()) for _ in range(2))}
    return make_run(session, user_message=message, agent_config={"tool_policy": tool_policy}, **fields)


def _claim_outcome(session: Session, run: Run) -> tuple[Any, ...]:
    stored = Run.objects.get(pk=run.pk)
    # Each session has an agent of its own: its id is named, not compared.
    events = [
        (event_type, {**data, "agent_id": "<agent>"} if "agent_id" in data else data)
        for _seq, event_type, data in session_events(session)
    ]
    position = Message.objects.filter(pk=run.user_message_id).values_list("position", flat=True).get()
    return stored.status, stored.version, stored.attempt, stored.lease_owner, position, events


@pytest.mark.parametrize("planning_mode", [PlanningMode.DIRECT, PlanningMode.AUTO])
@pytest.mark.django_db(transaction=True)
def test_a_claim_with_the_posters_hint_starts_the_run_as_the_usual_claim_in_one_statement_less(
    cast: Cast, planning_mode: str
) -> None:
    outcomes, counts, claimed_runs = [], [], []
    for use_hint in (False, True):
        session = make_session(cast, planning_mode=planning_mode)
        run = _posted_run(session)
        hint = claim_hint_for(run)
        with CaptureQueriesContext(connection) as queries:
            claimed = run_claim(run_id=run.pk, owner="worker-1", hint=hint if use_hint else None)
        assert claimed is not None
        outcomes.append(_claim_outcome(session, run))
        counts.append(len(queries))
        expected = Run.objects.select_related("tenant", "session", "user_message").get(pk=run.pk)
        claimed_runs.append(field_values(claimed) == field_values(expected))

    assert outcomes[0] == outcomes[1]
    assert outcomes[1][:5] == (S.EXECUTING, 2, 1, "worker-1", 1)
    assert claimed_runs == [True, True]
    if connection.vendor == "postgresql":  # the read is checked by the start instead
        assert counts[1] == counts[0] - 1


@pytest.mark.parametrize(
    "mismatch",
    [
        {"agent_id": uuid.uuid4()},
        {"attempt": 3},
        {"assigned_tool_ids": []},
        {"user_message_id": uuid.uuid4()},
    ],
    ids=["agent", "attempt", "tools", "message"],
)
@pytest.mark.django_db(transaction=True)
def test_a_hint_that_does_not_match_the_run_leaves_the_claim_to_the_usual_way(
    cast: Cast, mismatch: dict[str, Any]
) -> None:
    session = make_session(cast)
    run = _posted_run(session)
    hint = claim_hint_for(run)
    assert hint is not None
    wrong = replace(hint, **mismatch)

    claimed = run_claim(run_id=run.pk, owner="worker-1", hint=wrong)

    assert claimed is not None
    status, _version, attempt, owner, position, events = _claim_outcome(session, run)
    assert (status, attempt, owner, position) == (S.EXECUTING, 1, "worker-1", 1)
    assert [event_type for event_type, _data in events] == ["run.status", "run.started", "run.status"]
    assert events[1][1] == {"attempt": 1, "agent_id": "<agent>"}
    assert RunEvent.objects.get(session=session, type="run.started").data["agent_id"] == str(run.agent_id)


@pytest.mark.django_db(transaction=True)
def test_a_hinted_run_behind_an_older_queued_run_is_left_queued(cast: Cast) -> None:
    session = make_session(cast)
    older = _posted_run(session)
    newer = _posted_run(session)

    claimed = run_claim(run_id=newer.pk, owner="worker-1", hint=claim_hint_for(newer))

    assert claimed is None
    assert list(Run.objects.filter(pk__in=[older.pk, newer.pk]).values_list("status", flat=True)) == [
        S.QUEUED,
        S.QUEUED,
    ]
    assert session_events(session) == []


@pytest.mark.django_db
def test_a_claim_hint_travels_as_a_task_argument_and_only_for_runs_it_describes(cast: Cast) -> None:
    session = make_session(cast)
    run = _posted_run(session)
    hint = claim_hint_for(run)

    assert hint is not None
    assert ClaimHint.from_task_argument(hint.as_task_argument()) == hint
    assert ClaimHint.from_task_argument({"session_id": "not a uuid"}) is None
    assert claim_hint_for(_posted_run(session, parent_run=run)) is None
    planning = make_session(cast, planning_mode=PlanningMode.PLAN)
    assert claim_hint_for(_posted_run(planning)) is None
    auto = make_session(cast, planning_mode=PlanningMode.AUTO)
    assert claim_hint_for(_posted_run(auto)) is not None


@pytest.mark.parametrize(
    ("planning_mode", "status", "moves"),
    [
        (PlanningMode.PLAN, S.PLANNING, [("queued", "planning")]),
        (PlanningMode.AUTO, S.EXECUTING, [("queued", "planning"), ("planning", "executing")]),
    ],
)
@pytest.mark.django_db
def test_only_a_run_of_a_plan_agent_is_left_planning_by_its_claim(
    cast: Cast, planning_mode: str, status: str, moves: list[tuple[str, str]]
) -> None:
    session = make_session(cast, planning_mode=planning_mode)
    run = make_run(session)

    claimed = run_claim(run_id=run.pk, owner="worker-1")

    assert claimed is not None and claimed.status == status
    events = session_events(session)
    assert [event_type for _seq, event_type, _data in events][:2] == ["run.status", "run.started"]
    assert [
        (data["from"], data["to"]) for _seq, event_type, data in events if event_type == "run.status"
    ] == moves


@pytest.mark.django_db
def test_batched_events_are_stored_together_at_the_end_of_the_block_in_order(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    emit_event(session_id=session.pk, run_id=run.pk, event_type="step.started", data={"index": 0})

    with CaptureQueriesContext(connection) as queries, events_batched():
        for text in ("a", "b", "c"):
            emit_event(session_id=session.pk, run_id=run.pk, event_type="text.delta", data={"text": text})
        with events_batched():  # a nested block joins the outer one
            emit_event(session_id=session.pk, run_id=None, event_type="usage", data={})
        assert RunEvent.objects.filter(session=session).count() == 1
        stored_inside = len(queries)

    assert session_events(session) == [
        (1, "step.started", {"index": 0}),
        (2, "text.delta", {"text": "a"}),
        (3, "text.delta", {"text": "b"}),
        (4, "text.delta", {"text": "c"}),
        (5, "usage", {}),
    ]
    assert list(
        RunEvent.objects.filter(session=session).order_by("seq").values_list("run_id", flat=True)
    ) == [
        run.pk,
        run.pk,
        run.pk,
        run.pk,
        None,
    ]
    assert Session.objects.get(pk=session.pk).last_event_seq == 5
    # PostgreSQL: numbering and insert are one statement; SQLite: the counter update, one insert.
    expected_statements = 1 if connection.vendor == "postgresql" else 2
    assert len(queries) - stored_inside == expected_statements


@pytest.mark.django_db
def test_stored_events_keep_their_time_to_the_microsecond_and_their_data_as_given(
    cast: Cast, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    moment = datetime(2026, 11, 26, 12, 0, 0, 123456, tzinfo=UTC)
    monkeypatch.setattr("sessions.events.timezone.now", lambda: moment)
    tricky = {
        "text": 'quotes " and \\ backslashes, {braces}, ünïcode ✓',
        "nested": [{"n": 1.5, "none": None}],
    }

    with events_batched():
        emit_event(session_id=session.pk, run_id=run.pk, event_type="text.delta", data=tricky)
        emit_event(session_id=session.pk, run_id=None, event_type="usage", data={})

    assert list(
        RunEvent.objects.filter(session=session)
        .order_by("seq")
        .values_list("run_id", "type", "data", "created_at")
    ) == [
        (run.pk, "text.delta", tricky, moment),
        (None, "usage", {}, moment),
    ]


@pytest.mark.django_db
def test_flushing_a_batch_stores_what_it_holds_now(cast: Cast) -> None:
    session = make_session(cast)

    with events_batched():
        emit_event(session_id=session.pk, run_id=None, event_type="usage", data={"n": 1})
        flush_batched_events()
        assert [seq for seq, _type, _data in session_events(session)] == [1]
        emit_event(session_id=session.pk, run_id=None, event_type="usage", data={"n": 2})

    assert [(seq, data["n"]) for seq, _type, data in session_events(session)] == [(1, 1), (2, 2)]


@pytest.mark.django_db
def test_events_of_a_batch_that_raises_are_still_stored(cast: Cast) -> None:
    session = make_session(cast)

    with pytest.raises(RuntimeError), events_batched():
        emit_event(session_id=session.pk, run_id=None, event_type="error", data={"message": "boom"})
        raise RuntimeError("boom")

    assert session_events(session) == [(1, "error", {"message": "boom"})]


@pytest.mark.django_db(transaction=True)
def test_a_batch_that_raises_keeps_its_own_error_when_its_events_cannot_be_stored() -> None:
    missing_session = uuid.uuid4()

    with pytest.raises(RuntimeError, match="the block's own error"), events_batched():
        emit_event(session_id=missing_session, run_id=None, event_type="error", data={})
        raise RuntimeError("the block's own error")

    assert RunEvent.objects.filter(session_id=missing_session).count() == 0
