"""sessions_list, session_history and session_send: scoped to the run's tenant, acting as its user."""

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from agents.models import Agent
from sessions.models import Message, MessageRole, Run, RunEvent, RunStatus, Session
from sessions.selectors import queued_runs_for_session
from sessions.services import session_create
from tenants.actors import Actor
from tenants.models import Membership, Role
from tests.conftest import Cast
from tests.factories import last_placed_message_id, make_agent
from tools.builtins.base import ToolContext, ToolError
from tools.builtins.session_tools import run_session_history, run_session_send, run_sessions_list

pytestmark = pytest.mark.django_db


@dataclass
class World:
    agent: Agent
    here: Session
    other: Session
    bobs: Session
    carols: Session


@pytest.fixture
def world(cast: Cast) -> World:
    agent = make_agent(tenant=cast.tenant_a, name="helper")
    agent_b = make_agent(tenant=cast.tenant_b, name="carol's helper")
    alice = Actor(user=cast.alice, tenant=cast.tenant_a, role=Role.OWNER)
    bob = Actor(user=cast.bob, tenant=cast.tenant_a, role=Role.MEMBER)
    carol = Actor(user=cast.carol, tenant=cast.tenant_b, role=Role.OWNER)
    return World(
        agent=agent,
        here=session_create(actor=alice, agent=agent, title="Here"),
        other=session_create(actor=alice, agent=agent, title="Other"),
        bobs=session_create(actor=bob, agent=agent, title="Bob's"),
        carols=session_create(actor=carol, agent=agent_b, title="Carol's"),
    )


def context_in(session: Session, user: Any, role: str) -> ToolContext:
    return ToolContext(
        tenant_id=session.tenant_id,
        agent_id=session.agent_id,
        session_id=session.pk,
        run_id=uuid.uuid4(),
        user_id=user.pk,
        user_role=role,
    )


def add_message(session: Session, position: int | None, role: str, content: list[dict[str, Any]]) -> Message:
    return Message.objects.create(
        tenant=session.tenant,
        session=session,
        parent_id=last_placed_message_id(session),
        position=position,
        role=role,
        content=content,
    )


def test_sessions_list_shows_the_tenants_sessions_only(cast: Cast, world: World) -> None:
    Run.objects.create(
        tenant=cast.tenant_a, session=world.other, agent=world.agent, status=RunStatus.EXECUTING
    )
    Run.objects.create(tenant=cast.tenant_a, session=world.other, agent=world.agent, status=RunStatus.QUEUED)
    listed = json.loads(run_sessions_list({}, context_in(world.here, cast.alice, Role.OWNER)))
    assert sorted(
        (entry["title"], entry["agent"], entry["created_by"], entry["state"], entry["is_this_session"])
        for entry in listed
    ) == [
        ("Bob's", "helper", "bob@a.test", "idle", False),
        ("Here", "helper", "alice@a.test", "idle", True),
        ("Other", "helper", "alice@a.test", "executing (1 queued behind)", False),
    ]
    assert {entry["id"] for entry in listed} == {str(world.here.pk), str(world.other.pk), str(world.bobs.pk)}


def test_sessions_list_honours_the_limit(cast: Cast, world: World) -> None:
    assert (
        len(json.loads(run_sessions_list({"limit": 2}, context_in(world.here, cast.alice, Role.OWNER)))) == 2
    )


def test_session_history_returns_the_latest_transcript(cast: Cast, world: World) -> None:
    add_message(world.other, 1, MessageRole.USER, [{"type": "text", "text": "What is 6 x 7?"}])
    add_message(
        world.other,
        2,
        MessageRole.ASSISTANT,
        [
            {"type": "reasoning", "text": "hidden thoughts", "signature": None},
            {"type": "tool_call", "id": "c1", "name": "calculator", "arguments": {"expression": "6*7"}},
        ],
    )
    add_message(
        world.other,
        3,
        MessageRole.TOOL,
        [{"type": "tool_result", "tool_call_id": "c1", "content": "42", "is_error": False}],
    )
    add_message(world.other, 4, MessageRole.ASSISTANT, [{"type": "text", "text": "It is 42."}])
    add_message(world.other, None, MessageRole.USER, [{"type": "text", "text": "still queued"}])
    history = json.loads(
        run_session_history(
            {"session_id": str(world.other.pk), "limit": 3}, context_in(world.here, cast.bob, Role.MEMBER)
        )
    )
    assert history["session"] == {"id": str(world.other.pk), "title": "Other", "agent": "helper"}
    assert [(message["position"], message["role"], message["text"]) for message in history["messages"]] == [
        (2, "assistant", "[called tool calculator]"),
        (3, "tool", "[tool result: 42]"),
        (4, "assistant", "It is 42."),
    ]


@pytest.mark.parametrize("tool", [run_session_history, run_session_send])
def test_another_tenants_session_is_not_found(cast: Cast, world: World, tool: Any) -> None:
    add_message(world.carols, 1, MessageRole.USER, [{"type": "text", "text": "carol's private question"}])
    with pytest.raises(ToolError) as failed:
        tool(
            {"session_id": str(world.carols.pk), "content": "hi"},
            context_in(world.here, cast.alice, Role.OWNER),
        )
    assert str(failed.value) == f"session {world.carols.pk} not found"
    assert Message.objects.filter(session=world.carols).count() == 1
    assert Run.objects.filter(session=world.carols).count() == 0


def test_an_unknown_session_id_is_not_found(cast: Cast, world: World) -> None:
    with pytest.raises(ToolError) as failed:
        run_session_history({"session_id": "not-a-uuid"}, context_in(world.here, cast.alice, Role.OWNER))
    assert str(failed.value) == "session not-a-uuid not found"


def test_session_send_queues_a_run_in_the_other_sessions_lane(
    cast: Cast, world: World, django_capture_on_commit_callbacks: Any
) -> None:
    active = Run.objects.create(
        tenant=cast.tenant_a, session=world.other, agent=world.agent, status=RunStatus.EXECUTING
    )
    with django_capture_on_commit_callbacks(execute=True):
        result = json.loads(
            run_session_send(
                {"session_id": str(world.other.pk), "content": "Summarize your findings."},
                context_in(world.here, cast.alice, Role.OWNER),
            )
        )
    run = Run.objects.get(pk=result["run_id"])
    assert result == {
        "status": "queued",
        "session_id": str(world.other.pk),
        "message_id": str(run.user_message_id),
        "run_id": str(run.pk),
        "note": "The session's agent answers in that session, after any run already in its lane.",
    }
    assert (run.status, run.created_by_id, run.user_message.text if run.user_message else None) == (
        RunStatus.QUEUED,
        cast.alice.pk,
        "Summarize your findings.",
    )
    # The lane is busy: after the commit-time dispatch the new run still waits behind the active one.
    assert list(queued_runs_for_session(session=world.other)) == [run]
    assert list(RunEvent.objects.filter(run=run).values_list("type", flat=True)) == ["run.queued"]
    active.refresh_from_db()
    assert active.status == RunStatus.EXECUTING
    assert Run.objects.filter(session=world.here).count() == 0


def test_session_send_refuses_the_runs_own_session(cast: Cast, world: World) -> None:
    with pytest.raises(ToolError) as failed:
        run_session_send(
            {"session_id": str(world.here.pk), "content": "echo"},
            context_in(world.here, cast.alice, Role.OWNER),
        )
    assert str(failed.value) == "cannot send into this run's own session; answer here instead"
    assert Message.objects.filter(session=world.here).count() == 0


def test_a_member_cannot_send_into_someone_elses_session(cast: Cast, world: World) -> None:
    with pytest.raises(ToolError) as failed:
        run_session_send(
            {"session_id": str(world.other.pk), "content": "hello"},
            context_in(world.bobs, cast.bob, Role.MEMBER),
        )
    assert str(failed.value) == "Only the session's creator or an admin may do this."
    assert Run.objects.filter(session=world.other).count() == 0


def test_a_user_demoted_since_the_run_started_acts_with_the_new_role(cast: Cast, world: World) -> None:
    Membership.objects.filter(tenant=cast.tenant_a, user=cast.alice).update(role=Role.VIEWER)
    with pytest.raises(ToolError) as failed:
        run_session_send(
            {"session_id": str(world.other.pk), "content": "hello"},
            context_in(world.here, cast.alice, Role.OWNER),
        )
    assert str(failed.value) == "Your role does not allow this action."
    assert Run.objects.filter(session=world.other).count() == 0


def test_a_user_removed_from_the_tenant_cannot_use_session_tools(cast: Cast, world: World) -> None:
    Membership.objects.filter(tenant=cast.tenant_a, user=cast.bob).delete()
    with pytest.raises(ToolError) as failed:
        run_sessions_list({}, context_in(world.bobs, cast.bob, Role.MEMBER))
    assert str(failed.value) == "the run's user is no longer a member of this workspace"
