"""sessions.statements: the hand-written hot statements store and read what the ORM would, on both
databases (the ORM's own queries are the oracle)."""

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import partial
from typing import Any

import pytest
from django.db.models import Exists, OuterRef, Q, Subquery

from billing.models import ModelPrice
from files.models import FilePurpose, KnowledgeBase, StoredFile
from files.selectors import with_searchable_files
from sessions.branches import conversation_tree
from sessions.models import Message, Run, RunEvent, RunStatus, Session, Step, StepStatus
from sessions.selectors import LANE_STATUSES
from sessions.state import ACTIVE_RUN_STATUSES
from sessions.statements.post_reads import api_key_with_creator, session_for_posting
from sessions.statements.run_reads import (
    claim_read,
    dispatch_candidates,
    lane_head,
    model_price,
    placed_conversation,
    provider_key,
    reread_fields,
    step_count,
)
from sessions.statements.writes import (
    INSERT_CHUNK_ROWS,
    advance_counter,
    close_open_steps,
    insert_rows,
    update_row,
)
from tenants.models import ApiKey, Membership, ProviderKey, Role
from tenants.services import membership_set
from tests.conftest import Cast
from tests.factories import field_values, make_agent, make_api_key, make_run
from tools.models import ToolPolicy


def conversation_messages(session_id: uuid.UUID) -> Q:
    """The conversation's own messages, as the ORM selected them: executors' belong to their runs."""
    return Q(session_id=session_id) & ~Q(run__parent_run__isnull=False)


MOMENT = datetime(2026, 11, 28, 4, 5, 6, 789012, tzinfo=UTC)


def test_an_update_sets_values_adds_to_counters_and_reads_back_as_the_orm_wrote_them(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    step = Step.objects.create(
        run=run, tenant_id=run.tenant_id, index=0, kind="model_call", status=StepStatus.RUNNING
    )
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


def test_the_placed_conversation_leaves_out_queued_and_executor_messages(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    executor = Run.objects.create(
        tenant=cast.tenant_a, session=run.session, agent=run.agent, created_by=cast.alice, parent_run=run
    )
    first = Message.objects.create(
        tenant=cast.tenant_a, session=run.session, role="user", content=[], position=1
    )
    answer = Message.objects.create(
        tenant=cast.tenant_a,
        session=run.session,
        role="assistant",
        content=[],
        position=2,
        parent=first,
        run=run,
    )
    Message.objects.create(tenant=cast.tenant_a, session=run.session, role="user", content=[], parent=answer)
    Message.objects.create(
        tenant=cast.tenant_a, session=run.session, role="assistant", content=[], position=3, run=executor
    )
    elsewhere = make_run(agent=make_agent(tenant=cast.tenant_b), user=cast.bob)
    Message.objects.create(
        tenant=cast.tenant_b, session=elsewhere.session, role="user", content=[], position=1
    )

    rows = placed_conversation(run.session_id)

    oracle = Message.objects.filter(conversation_messages(run.session_id), position__isnull=False)
    assert sorted(rows, key=lambda row: row[2]) == list(
        oracle.order_by("position").values_list("id", "parent_id", "position", "run_id")
    )
    assert [row[0] for row in sorted(rows, key=lambda row: row[2])] == [first.pk, answer.pk]


def test_closing_open_steps_moves_only_the_runs_open_steps(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    other = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    running = Step.objects.create(
        run=run, tenant_id=run.tenant_id, index=0, kind="model_call", status=StepStatus.RUNNING, version=2
    )
    pending = Step.objects.create(
        run=run, tenant_id=run.tenant_id, index=1, kind="tool_call", status=StepStatus.PENDING
    )
    done = Step.objects.create(
        run=run, tenant_id=run.tenant_id, index=2, kind="tool_call", status=StepStatus.COMPLETED, version=1
    )
    theirs = Step.objects.create(
        run=other, tenant_id=other.tenant_id, index=0, kind="model_call", status=StepStatus.RUNNING
    )
    untouched = {step.pk: field_values(step) for step in (done, theirs)}

    closed = close_open_steps(
        run.pk,
        open_statuses=(StepStatus.PENDING, StepStatus.RUNNING),
        to_status=StepStatus.CANCELLED,
        finished_at=MOMENT,
    )

    assert closed == 2
    assert list(
        Step.objects.filter(pk__in=[running.pk, pending.pk])
        .order_by("index")
        .values_list("status", "version", "finished_at")
    ) == [(StepStatus.CANCELLED, 3, MOMENT), (StepStatus.CANCELLED, 1, MOMENT)]
    assert {step.pk: field_values(step) for step in Step.objects.filter(pk__in=untouched)} == untouched


def test_fields_read_again_are_the_rows_and_a_deleted_run_raises(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.CANCELLING, version=4, input_tokens=12, lease_owner="w:1", lease_expires_at=MOMENT
    )
    fields = ["status", "version", "input_tokens", "lease_owner", "lease_expires_at"]

    has_child_runs = reread_fields(run, fields)

    assert [getattr(run, name) for name in fields] == [RunStatus.CANCELLING, 4, 12, "w:1", MOMENT]
    assert has_child_runs is False
    Run.objects.filter(pk=run.pk).delete()
    with pytest.raises(Run.DoesNotExist):
        reread_fields(run, fields)


def test_step_count_and_child_runs_are_the_runs_own(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    other = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice)
    for index in range(3):
        Step.objects.create(
            run=run, tenant_id=run.tenant_id, index=index, kind="model_call", status=StepStatus.COMPLETED
        )
    Step.objects.create(
        run=other, tenant_id=other.tenant_id, index=0, kind="model_call", status=StepStatus.COMPLETED
    )
    Run.objects.create(
        tenant=cast.tenant_a,
        session=other.session,
        agent=other.agent,
        created_by=cast.alice,
        parent_run=other,
    )

    assert (step_count(run.pk), step_count(other.pk), step_count(uuid.uuid4())) == (3, 1, 0)
    assert (reread_fields(run, ["status"]), reread_fields(other, ["status"])) == (False, True)


def test_a_tenants_provider_key_and_a_models_price_read_as_the_orm_reads_them(cast: Cast) -> None:
    key = ProviderKey.objects.create(tenant=cast.tenant_a, provider="anthropic", api_key="sk-ant-secret")
    ProviderKey.objects.create(tenant=cast.tenant_b, provider="openai", api_key="sk-other")
    price = ModelPrice.objects.create(
        provider="anthropic",
        model="claude-test",
        input_per_million=Decimal("3.000001"),
        output_per_million=Decimal("15"),
        as_of=date(2026, 11, 1),
    )

    found = provider_key(tenant_id=cast.tenant_a.pk, provider="anthropic")
    assert found is not None and field_values(found) == field_values(ProviderKey.objects.get(pk=key.pk))
    assert found.api_key == "sk-ant-secret"
    assert provider_key(tenant_id=cast.tenant_a.pk, provider="openai") is None
    read = model_price(provider="anthropic", model="claude-test")
    assert read is not None and field_values(read) == field_values(ModelPrice.objects.get(pk=price.pk))
    assert model_price(provider="openai", model="claude-test") is None


def _orm_conversation(session_id: uuid.UUID) -> dict[uuid.UUID, tuple[object, ...]]:
    """The conversation's tree rows as the ORM read them before: the oracle for the SQL."""
    newest_run = (
        Run.objects.filter(user_message_id=OuterRef("pk"), parent_run__isnull=True)
        .order_by("-created_at")
        .values("created_at")[:1]
    )
    pending = Run.objects.filter(
        Q(user_message_id=OuterRef("pk")) | Q(pk=OuterRef("run_id")), status__in=LANE_STATUSES
    )
    rows = (
        Message.objects.filter(conversation_messages(session_id))
        .annotate(latest_run_at=Subquery(newest_run), is_pending=Exists(pending))
        .values_list(
            "id", "parent_id", "position", "role", "created_at", "run_id", "latest_run_at", "is_pending"
        )
    )
    return {row[0]: (*row[:6], row[6] if row[3] == "user" else None, row[7]) for row in rows}


def test_the_conversation_tree_reads_what_the_orm_read(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice, status=RunStatus.COMPLETED)
    session = run.session

    def message(role: str, **fields: object) -> Message:
        return Message.objects.create(tenant=cast.tenant_a, session=session, role=role, content=[], **fields)

    def new_run(user_message: Message, status: str, **fields: object) -> Run:
        return Run.objects.create(
            tenant=cast.tenant_a,
            session=session,
            agent=run.agent,
            created_by=cast.alice,
            user_message=user_message,
            status=status,
            **fields,
        )

    first = message("user", position=1)
    Run.objects.filter(pk=run.pk).update(user_message=first)
    answer = message("assistant", position=2, parent=first, run=run)
    edit = message("user", position=3)  # a second branch from the start, its newest run still going
    new_run(edit, RunStatus.FAILED)
    going = new_run(edit, RunStatus.EXECUTING)
    partial = message("assistant", position=5, parent=edit, run=going)  # pending through its run
    queued = message("user", parent=answer)
    new_run(queued, RunStatus.QUEUED)
    executor = new_run(first, RunStatus.EXECUTING, parent_run=run)
    message("assistant", position=4, run=executor)  # an executor's turn: not the conversation's
    elsewhere = make_run(agent=make_agent(tenant=cast.tenant_b), user=cast.bob)
    Message.objects.create(
        tenant=cast.tenant_b, session=elsewhere.session, role="user", content=[], position=1
    )

    tree = conversation_tree(session.pk)

    read = {
        node.id: (
            node.id,
            node.parent_id,
            node.position,
            node.role,
            node.created_at,
            node.run_id,
            node.latest_run_at,
            node.is_pending,
        )
        for node in tree.nodes.values()
    }
    assert read == _orm_conversation(session.pk)
    # The first message's executor run is active.
    assert {node_id: row[7] for node_id, row in read.items()} == {
        first.pk: True,
        answer.pk: False,
        edit.pk: True,
        partial.pk: True,
        queued.pk: True,
    }


def test_a_claims_read_gives_the_run_with_its_tenant_session_and_message_as_the_orm_reads_them(
    cast: Cast,
) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice, status=RunStatus.QUEUED)
    cast.tenant_a.settings = {"active_runs_per_user": 3, "nested": {"on": True}}
    cast.tenant_a.save()
    message = Message.objects.create(
        tenant=cast.tenant_a, session=run.session, role="user", content=[{"type": "text", "text": "Grüße"}]
    )
    Run.objects.filter(pk=run.pk).update(
        user_message=message, agent_config={"model_name": "m", "temperature": 0.5}, lease_expires_at=MOMENT
    )
    child = Run.objects.create(
        tenant=cast.tenant_a, session=run.session, agent=run.agent, created_by=cast.alice, parent_run=run
    )
    for index in range(2):
        Step.objects.create(
            run=run, tenant_id=run.tenant_id, index=index, kind="model_call", status=StepStatus.COMPLETED
        )
    Step.objects.create(
        run=child, tenant_id=child.tenant_id, index=0, kind="model_call", status=StepStatus.COMPLETED
    )

    read = claim_read(run.pk)

    oracle = Run.objects.select_related("tenant", "session", "user_message").get(pk=run.pk)
    assert read is not None and oracle.user_message is not None
    assert field_values(read) == field_values(oracle)
    assert field_values(read.tenant) == field_values(oracle.tenant)
    assert field_values(read.session) == field_values(oracle.session)
    assert read.user_message is not None
    assert field_values(read.user_message) == field_values(oracle.user_message)
    assert (read.tenant.settings, read.user_message.content) == (
        {"active_runs_per_user": 3, "nested": {"on": True}},
        [{"type": "text", "text": "Grüße"}],
    )
    assert read.stored_step_count == Step.objects.filter(run=run).count() == 2
    read_child = claim_read(child.pk)
    assert read_child is not None and read_child.user_message is None
    assert read_child.stored_step_count == 1
    assert field_values(read_child) == field_values(Run.objects.get(pk=child.pk))
    assert claim_read(uuid.uuid4()) is None


def another_run_of_its_session(run: Run, status: str, **fields: object) -> Run:
    return Run.objects.create(
        tenant=run.tenant,
        session=run.session,
        agent=run.agent,
        created_by=run.created_by,
        status=status,
        **fields,
    )


def test_the_lanes_head_is_its_active_run_else_its_oldest_queued_one(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice, status=RunStatus.COMPLETED)
    new_run = partial(another_run_of_its_session, run)

    lane = [*ACTIVE_RUN_STATUSES, RunStatus.QUEUED]
    assert lane_head(run.session_id, statuses=lane, queued=RunStatus.QUEUED) is None
    older = new_run(RunStatus.QUEUED)
    new_run(RunStatus.QUEUED)
    new_run(RunStatus.EXECUTING, parent_run=run)  # an executor: outside the lane
    assert lane_head(run.session_id, statuses=lane, queued=RunStatus.QUEUED) == (older.pk, RunStatus.QUEUED)
    active = new_run(RunStatus.AWAITING_APPROVAL)
    assert lane_head(run.session_id, statuses=lane, queued=RunStatus.QUEUED) == (
        active.pk,
        RunStatus.AWAITING_APPROVAL,
    )


def test_the_dispatch_candidates_are_queued_executors_and_the_lanes_runs_oldest_first(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice, status=RunStatus.EXECUTING)
    make_run(agent=run.agent, user=cast.alice, status=RunStatus.QUEUED)  # another session's lane
    new_run = partial(another_run_of_its_session, run)

    queued_executor = new_run(RunStatus.QUEUED, parent_run=run)
    new_run(RunStatus.EXECUTING, parent_run=run)  # an executor already running: not dispatched again
    new_run(RunStatus.COMPLETED)
    queued = new_run(RunStatus.QUEUED)
    lane = [*ACTIVE_RUN_STATUSES, RunStatus.QUEUED]

    candidates = dispatch_candidates(run.session_id, statuses=lane, queued=RunStatus.QUEUED)

    assert candidates == [
        (run.pk, RunStatus.EXECUTING, None),
        (queued_executor.pk, RunStatus.QUEUED, run.pk),
        (queued.pk, RunStatus.QUEUED, None),
    ]


def test_an_api_keys_read_gives_its_tenant_creator_and_creators_role_as_the_orm_reads_them(
    cast: Cast,
) -> None:
    plaintext = make_api_key(tenant=cast.tenant_a, user=cast.alice, scope="read")
    prefix = plaintext.split("_")[1]
    membership_set(tenant=cast.tenant_b, user=cast.alice, role=Role.VIEWER)  # another tenant's role

    found = api_key_with_creator(prefix)

    oracle = ApiKey.objects.select_related("tenant", "created_by").get(prefix=prefix)
    assert found is not None
    api_key, role = found
    assert field_values(api_key) == field_values(oracle)
    assert field_values(api_key.tenant) == field_values(oracle.tenant)
    assert field_values(api_key.created_by) == field_values(oracle.created_by)
    assert role == Membership.objects.get(tenant=cast.tenant_a, user=cast.alice).role == Role.OWNER
    Membership.objects.filter(tenant=cast.tenant_a, user=cast.alice).delete()
    found_after_leaving = api_key_with_creator(prefix)
    assert found_after_leaving is not None and found_after_leaving[1] is None
    assert api_key_with_creator("0" * len(prefix)) is None


def _orm_session_for_posting(tenant_id: uuid.UUID, session_id: uuid.UUID) -> Session:
    sessions = Session.objects.filter(tenant_id=tenant_id).select_related("agent", "agent__tool_policy")
    return with_searchable_files(sessions).get(pk=session_id)


@pytest.mark.parametrize("has_policy", [True, False], ids=["stored policy", "no policy"])
def test_a_session_read_for_posting_gives_its_agent_policy_and_searchable_files_as_the_orm_reads_them(
    cast: Cast, has_policy: bool, django_assert_num_queries: Any
) -> None:
    agent = make_agent(tenant=cast.tenant_a, system_prompt="Be brief.")
    if has_policy:
        ToolPolicy.objects.create(agent=agent, allow=["calculator"], max_calls_per_turn=3)
    session = make_run(agent=agent, user=cast.alice).session
    other_session = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.alice).session

    def flags(read: Session) -> tuple[bool, bool]:
        return (bool(vars(read)["agent_has_knowledge"]), bool(vars(read)["has_attachments"]))

    read = session_for_posting(tenant_id=cast.tenant_a.pk, session_id=session.pk)

    oracle = _orm_session_for_posting(cast.tenant_a.pk, session.pk)
    assert read is not None
    assert field_values(read) == field_values(oracle)
    assert field_values(read.agent) == field_values(oracle.agent)
    with django_assert_num_queries(0):
        if has_policy:
            assert field_values(read.agent.tool_policy) == field_values(oracle.agent.tool_policy)
            assert read.agent.tool_policy.agent is read.agent
        else:
            with pytest.raises(ToolPolicy.DoesNotExist):
                read.agent.tool_policy  # noqa: B018
    assert flags(read) == flags(oracle) == (False, False)

    knowledge = KnowledgeBase.objects.create(tenant=cast.tenant_a, name="Manuals")
    knowledge.agents.add(agent)
    StoredFile.objects.create(
        tenant=cast.tenant_a, session=other_session, purpose=FilePurpose.ATTACHMENT, name="a.txt", size=1
    )
    read = session_for_posting(tenant_id=cast.tenant_a.pk, session_id=session.pk)
    assert read is not None
    assert flags(read) == flags(_orm_session_for_posting(cast.tenant_a.pk, session.pk)) == (True, False)
    StoredFile.objects.create(
        tenant=cast.tenant_a, session=session, purpose=FilePurpose.KNOWLEDGE, name="k.txt", size=1
    )
    read = session_for_posting(tenant_id=cast.tenant_a.pk, session_id=session.pk)
    assert read is not None and flags(read) == (True, False)  # a knowledge file is no attachment
    knowledge.agents.remove(agent)
    StoredFile.objects.create(
        tenant=cast.tenant_a, session=session, purpose=FilePurpose.ATTACHMENT, name="b.txt", size=1
    )
    read = session_for_posting(tenant_id=cast.tenant_a.pk, session_id=session.pk)
    assert read is not None
    assert flags(read) == flags(_orm_session_for_posting(cast.tenant_a.pk, session.pk)) == (False, True)
    assert session_for_posting(tenant_id=cast.tenant_b.pk, session_id=session.pk) is None
    assert session_for_posting(tenant_id=cast.tenant_a.pk, session_id=uuid.uuid4()) is None
