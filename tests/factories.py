"""Plain factory functions for test objects; each call makes a fresh, valid object."""

import itertools
from typing import Any

from django.db.models import Model

from agents.models import Agent, ModelProvider, PlanningMode
from sessions.models import Message, Run, RunStatus, Session
from tenants.models import Role, Tenant
from tenants.services import api_key_create, membership_set, user_get_or_create

_counter = itertools.count(1)


def make_tenant(slug: str | None = None) -> Tenant:
    number = next(_counter)
    return Tenant.objects.create(slug=slug or f"tenant-{number}", name=f"Tenant {number}")


def make_user(
    email: str, *, tenant: Tenant | None = None, role: str = Role.MEMBER, password: str | None = None
) -> Any:
    user, _ = user_get_or_create(email=email, password=password)
    if tenant is not None:
        membership_set(tenant=tenant, user=user, role=role)
    return user


def make_api_key(*, tenant: Tenant, user: Any, scope: str = "write") -> str:
    return api_key_create(tenant=tenant, created_by=user, name=f"key {next(_counter)}", scope=scope).plaintext


def make_agent(*, tenant: Tenant, name: str | None = None, **fields: Any) -> Agent:
    fields.setdefault("model_provider", ModelProvider.OFFLINE)
    # Tests that are not about planning use the normal loop without create_plan, so requests
    # carry only the agent's tools (the product's default is auto).
    fields.setdefault("planning_mode", PlanningMode.DIRECT)
    return Agent.objects.create(tenant=tenant, name=name or f"agent {next(_counter)}", **fields)


def make_run(*, agent: Agent, user: Any, status: str = RunStatus.EXECUTING) -> Run:
    """A run in a session of its own, as a tool sees it while the run executes."""
    session = Session.objects.create(tenant=agent.tenant, agent=agent, created_by=user, title="Work")
    return Run.objects.create(
        tenant=agent.tenant, session=session, agent=agent, created_by=user, status=status
    )


def field_values(instance: Model) -> dict[str, Any]:
    """Every column's value of a model instance, to compare objects loaded two ways."""
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


def last_placed_message_id(session: Any) -> Any:
    """The session's newest placed message: one stored by a helper follows it (one branch,
    as sessions.branches links a run's messages)."""
    newest = (
        Message.objects.filter(session=session, position__isnull=False)
        .exclude(run__parent_run__isnull=False)  # executors' turns are outside the conversation
        .order_by("-position")
    )
    return newest.values_list("id", flat=True).first()
