"""The run and step state machines (sessions.state) and how events are numbered and batched."""

import threading
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from agents.models import PlanningMode
from agents.runtime.types import ChatMessage, Usage
from sessions.events import emit_event, events_batched, flush_batched_events, new_event
from sessions.lane import run_claim
from sessions.models import Message, Run, RunEvent, RunStatus, Session, Step, StepStatus
from sessions.recorder import DjangoRunRecorder
from sessions.run_end import run_finish
from sessions.run_host import RunHandle, new_lease_owner
from sessions.state import (
    RUN_TRANSITIONS,
    STEP_TRANSITIONS,
    TERMINAL_RUN_STATUSES,
    InvalidTransition,
    StaleTransition,
    run_moves,
    run_transition,
    step_transition,
)
from tests.conftest import Cast
from tests.factories import make_agent

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
def test_moves_along_a_path_are_one_update_and_return_each_moves_audit(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session)

    with CaptureQueriesContext(connection) as queries:
        audits = run_moves(
            run, [S.PLANNING, S.EXECUTING, S.COMPLETED], actor="tester", stop_reason="end_turn"
        )

    assert [query["sql"].split()[0] for query in queries.captured_queries] == ["UPDATE"]
    assert audits == [
        {"from": S.QUEUED, "to": S.PLANNING, "actor": "tester"},
        {"from": S.PLANNING, "to": S.EXECUTING, "actor": "tester"},
        {"from": S.EXECUTING, "to": S.COMPLETED, "actor": "tester", "stop_reason": "end_turn"},
    ]
    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.version, stored.stop_reason, stored.lease_owner) == (
        S.COMPLETED,
        3,
        "end_turn",
        "",
    )
    assert (run.status, run.version, stored.finished_at is not None) == (S.COMPLETED, 3, True)
    assert session_events(session) == []  # the caller emits the audits


@pytest.mark.django_db
def test_a_path_with_a_forbidden_move_raises_and_a_stale_one_returns_none_both_changing_nothing(
    cast: Cast,
) -> None:
    session = make_session(cast)
    run = make_run(session)

    with pytest.raises(InvalidTransition):
        run_moves(run, [S.PLANNING, S.QUEUED, S.COMPLETED])
    Run.objects.filter(pk=run.pk).update(version=F("version") + 1)  # another worker moved it first
    assert run_moves(run, [S.PLANNING, S.EXECUTING], lease_owner="worker-1") is None

    stored = Run.objects.get(pk=run.pk)
    assert (stored.status, stored.version, stored.lease_owner) == (S.QUEUED, 1, "")
    assert (run.status, run.version, run.lease_owner) == (S.QUEUED, 0, "")


@pytest.mark.django_db
@pytest.mark.parametrize(("source", "target"), ALLOWED_STEP_MOVES)
def test_every_allowed_step_transition_moves_and_bumps_the_version(
    cast: Cast, source: str, target: str
) -> None:
    run = make_run(make_session(cast), status=S.EXECUTING)
    step = Step.objects.create(run=run, tenant_id=run.tenant_id, index=0, kind="model_call", status=source)

    step_transition(step, target)

    assert Step.objects.filter(pk=step.pk).values_list("status", "version").get() == (target, 1)


@pytest.mark.django_db
@pytest.mark.parametrize("source", [StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED])
def test_finished_steps_do_not_move(cast: Cast, source: str) -> None:
    run = make_run(make_session(cast), status=S.EXECUTING)
    step = Step.objects.create(run=run, tenant_id=run.tenant_id, index=0, kind="model_call", status=source)

    with pytest.raises(InvalidTransition):
        step_transition(step, StepStatus.RUNNING)

    assert Step.objects.filter(pk=step.pk).values_list("status", "version").get() == (source, 0)


@pytest.mark.django_db
def test_a_terminal_run_cancels_its_open_steps_and_leaves_finished_ones(cast: Cast) -> None:
    run = make_run(make_session(cast), status=S.EXECUTING)
    for index, status in enumerate([StepStatus.COMPLETED, StepStatus.RUNNING, StepStatus.PENDING]):
        Step.objects.create(run=run, tenant_id=run.tenant_id, index=index, kind="tool_call", status=status)

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
        Step.objects.create(run=run, tenant_id=run.tenant_id, index=index, kind="tool_call", status=status)

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
                "cost": "0.000000",  # no priced model call recorded
                "unpriced_model_calls": 0,
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
    # One transaction: each step, the session's event counter and the events.
    statements = [query["sql"] for query in writes.captured_queries if "SAVEPOINT" not in query["sql"]]
    assert len(statements) == 4


@pytest.mark.django_db
def test_a_batch_that_raises_stores_nothing_of_what_it_recorded(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)

    with pytest.raises(RuntimeError, match="boom"), recorder.batch():
        step_id = recorder.start_step(kind="model_call", input={})
        raise RuntimeError("boom")

    assert Step.objects.filter(pk=step_id).count() == 0
    assert session_events(session) == []


@pytest.mark.django_db
def test_a_finished_run_announces_the_totals_its_steps_stored(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    for tokens in (3, 4):
        with recorder.batch():
            step_id = recorder.start_step(kind="model_call", input={})
        recorder.complete_step(step_id, output={}, usage=Usage(input_tokens=tokens, output_tokens=1))

    run_finish(run, status=S.COMPLETED, stop_reason="end_turn")

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

    run_finish(run, status=S.COMPLETED, stop_reason="end_turn")

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


@pytest.mark.parametrize("is_child_run", [False, True], ids=["top-level run", "executor run"])
@pytest.mark.django_db(transaction=True)
def test_two_workers_claiming_one_run_leave_exactly_one_owner(cast: Cast, is_child_run: bool) -> None:
    """A task delivered twice: one claim wins, the other finds nothing to claim (None), whether
    the lane is checked (a top-level run) or not (an executor, whose parent holds the lane)."""
    session = make_session(cast)
    parent = make_run(session, status=S.EXECUTING) if is_child_run else None
    run = make_run(session, parent_run=parent)
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
    # The session's counter advanced by three, then one insert of the three events.
    assert len(queries) - stored_inside == 2


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


@pytest.mark.django_db
def test_a_tool_argument_named_like_a_secret_is_stored_masked_in_the_step_and_its_event(cast: Cast) -> None:
    session = make_session(cast)
    run = make_run(session, status=S.EXECUTING)
    recorder = DjangoRunRecorder(run, handle=RunHandle(run.pk, "worker-1"), deadline=None)
    arguments = {"city": "Oslo", "api_key": "sk-live-123"}

    with recorder.batch():
        step_id = recorder.start_step(
            kind="tool_call", input={"tool_call_id": "call-1", "name": "weather", "arguments": arguments}
        )
        recorder.emit("tool.call", {"tool_call_id": "call-1", "name": "weather", "arguments": arguments})

    assert Step.objects.get(pk=step_id).input == {
        "tool_call_id": "call-1",
        "name": "weather",
        "arguments": {"city": "Oslo", "api_key": "***"},
    }
    [call] = [data for _seq, event_type, data in session_events(session) if event_type == "tool.call"]
    assert call["arguments"] == {"city": "Oslo", "api_key": "***"}
    assert arguments == {"city": "Oslo", "api_key": "sk-live-123"}  # the loop's copy is untouched


def test_an_event_type_outside_the_contract_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown event type 'run\.exploded'"):
        new_event(session_id=uuid.uuid4(), run_id=None, event_type="run.exploded", data={})
