"""sessions.statements: the hand-written hot writes store what the ORM would store, on both databases."""

import uuid
from datetime import UTC, datetime

from sessions.models import Message, Run, RunEvent, RunStatus, Session, Step, StepStatus
from sessions.statements import INSERT_CHUNK_ROWS, advance_counter, insert_rows, update_row
from tests.conftest import Cast
from tests.factories import field_values, make_agent, make_run

MOMENT = datetime(2026, 11, 28, 4, 5, 6, 789012, tzinfo=UTC)


def test_an_update_sets_values_adds_to_counters_and_reads_back_as_the_orm_wrote_them(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    step = Step.objects.create(run=run, index=0, kind="model_call", status=StepStatus.RUNNING)
    output = {"content": [{"type": "text", "text": "Grüße"}], "nested": {"n": 1.5, "none": None}}

    changed = update_row(
        Step,
        step.pk,
        values={"status": StepStatus.COMPLETED, "output": output, "finished_at": MOMENT, "error": ""},
        increments={"version": 1, "input_tokens": 20},
        expected={"status": StepStatus.RUNNING, "version": 0},
    )

    assert changed == 1
    step.refresh_from_db()
    assert (step.status, step.version, step.input_tokens) == (StepStatus.COMPLETED, 1, 20)
    assert step.output == output
    assert step.finished_at == MOMENT


def test_an_update_whose_expected_values_moved_on_changes_nothing(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice, status=RunStatus.EXECUTING)
    before = field_values(Run.objects.get(pk=run.pk))

    changed = update_row(
        Run,
        run.pk,
        values={"status": RunStatus.COMPLETED, "lease_owner": ""},
        increments={"version": 1},
        expected={"status": RunStatus.EXECUTING, "version": 7},
    )

    assert changed == 0
    assert field_values(Run.objects.get(pk=run.pk)) == before


def test_an_update_of_a_foreign_key_by_its_id_and_to_null(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    parent = Message.objects.create(tenant=cast.tenant_a, session=run.session, role="user", content=[])
    child = Message.objects.create(tenant=cast.tenant_a, session=run.session, role="assistant", content=[])

    assert update_row(Message, child.pk, values={"position": 4, "parent_id": parent.pk}) == 1
    child.refresh_from_db()
    assert (child.position, child.parent_id) == (4, parent.pk)

    assert update_row(Message, child.pk, values={"position": None, "parent_id": None}) == 1
    child.refresh_from_db()
    assert (child.position, child.parent_id) == (None, None)


def test_rows_inserted_in_chunks_read_back_in_order_with_their_values(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    count = INSERT_CHUNK_ROWS * 2 + 3
    rows = [
        (run.session_id, run.pk if seq % 2 else None, seq, "text.delta", {"text": f"part {seq}"}, MOMENT)
        for seq in range(1, count + 1)
    ]

    insert_rows(RunEvent, ("session_id", "run_id", "seq", "type", "data", "created_at"), rows)

    stored = list(
        RunEvent.objects.filter(session=run.session).values_list(
            "session_id", "run_id", "seq", "type", "data", "created_at"
        )
    )
    assert stored == rows


def test_a_counter_advances_by_the_count_and_returns_its_new_value(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    other = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)

    assert advance_counter(Session, run.session_id, "last_event_seq", 3) == 3
    assert advance_counter(Session, run.session_id, "last_event_seq", 2) == 5
    assert Session.objects.get(pk=run.session_id).last_event_seq == 5
    assert Session.objects.get(pk=other.session_id).last_event_seq == 0
    assert advance_counter(Session, uuid.uuid4(), "last_event_seq", 1) is None
