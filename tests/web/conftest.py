"""The web pages' world: the cast, an agent and a conversation in each tenant, signed-in clients."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from agents.models import Agent
from sessions.models import Message, MessageRole, Run, RunStatus, Session
from tenants.models import Role
from tests.conftest import Cast
from tests.factories import last_placed_message_id, make_agent, make_user


@dataclass
class World:
    cast: Cast
    dave: Any  # admin of tenant A
    agent_a: Agent
    agent_b: Agent
    session_a: Session
    session_b: Session
    run_a: Run
    run_b: Run


def finished_conversation(session: Session, *, question: str, answer: str) -> Run:
    """A user message and its completed run with one answer, as the worker stores them."""
    position = Message.objects.filter(session=session).count()
    message = Message.objects.create(
        tenant=session.tenant,
        session=session,
        parent_id=last_placed_message_id(session),
        position=position + 1,
        role=MessageRole.USER,
        content=[{"type": "text", "text": question}],
    )
    run = Run.objects.create(
        tenant=session.tenant,
        session=session,
        agent=session.agent,
        user_message=message,
        created_by=session.created_by,
        status=RunStatus.COMPLETED,
        stop_reason="end_turn",
        input_tokens=120,
        output_tokens=30,
    )
    message.run = run
    message.save(update_fields=["run"])
    Message.objects.create(
        tenant=session.tenant,
        session=session,
        parent=message,
        position=position + 2,
        role=MessageRole.ASSISTANT,
        content=[{"type": "text", "text": answer}],
        run=run,
    )
    return run


@pytest.fixture
def world(cast: Cast) -> World:
    dave = make_user("dave@a.test", tenant=cast.tenant_a, role=Role.ADMIN, password="dave-password")
    agent_a = make_agent(tenant=cast.tenant_a, name="Helper", description="Helps with sums")
    agent_b = make_agent(tenant=cast.tenant_b, name="Carol's agent")
    session_a = Session.objects.create(
        tenant=cast.tenant_a, agent=agent_a, created_by=cast.bob, title="Bob's sums"
    )
    session_b = Session.objects.create(
        tenant=cast.tenant_b, agent=agent_b, created_by=cast.carol, title="Carol's chat"
    )
    return World(
        cast=cast,
        dave=dave,
        agent_a=agent_a,
        agent_b=agent_b,
        session_a=session_a,
        session_b=session_b,
        run_a=finished_conversation(session_a, question="What is 2+2?", answer="2+2 = 4."),
        run_b=finished_conversation(session_b, question="Hello", answer="Hi Carol."),
    )


@pytest.fixture
def client_for() -> Callable[[Any], Client]:
    def signed_in(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return signed_in
