"""Writes the pages need that no app offered yet: member roles, limits, agent + tools.

Adding members is an invitation (``tenants.invitations``).

Each one is small and would move to its app (tenants, agents) once the API needs it too.
"""

from datetime import timedelta
from typing import Any

from django.contrib.auth import update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone

from agents.models import Agent
from agents.services import agent_create, agent_update
from core.api.errors import ServerBusy
from mcp_servers.health import mcp_server_check
from mcp_servers.models import McpServer
from mcp_servers.services import mcp_server_create, mcp_server_update
from sessions.models import Session
from sessions.services import session_create, session_post_message
from tenants.actors import Actor
from tenants.limits import DEFAULT_LIMITS
from tenants.models import Membership, Role
from tenants.services import api_key_create, membership_delete, membership_role_update
from tools.models import Tool
from tools.services import agent_tools_update

EDITABLE_LIMITS = tuple(DEFAULT_LIMITS)
LIMIT_RANGE = (1, 1_000_000_000)


@transaction.atomic
def agent_save_with_tools(
    *,
    actor: Actor,
    agent: Agent | None,
    fields: dict[str, Any],
    tool_profile: str,
    assigned_tools: list[Tool],
) -> Agent:
    """Create or update an agent together with its tool profile and assigned tools, all or nothing."""
    saved = agent_create(actor=actor, **fields) if agent is None else agent_update(agent=agent, **fields)
    try:
        agent_tools_update(
            actor=actor, agent=saved, policy_fields={"profile": tool_profile}, assigned_tools=assigned_tools
        )
    except ValidationError as error:
        if hasattr(error, "error_dict") and "profile" in error.error_dict:
            raise ValidationError({"tool_profile": error.message_dict["profile"]}) from error
        raise
    return saved


@transaction.atomic
def agent_tool_policy_save(
    *, actor: Actor, agent: Agent, policy_fields: dict[str, Any], assigned_tools: list[Tool]
) -> None:
    """Save the tool policy page: the policy, the assignments, and the agent's one approval list.

    The page shows the names the agent itself holds (the API's ``approval_required_tools``) in
    the policy's list, so saving moves them there; runs apply both lists together either way.
    """
    agent_tools_update(actor=actor, agent=agent, policy_fields=policy_fields, assigned_tools=assigned_tools)
    if agent.approval_required_tools:
        agent_update(agent=agent, approval_required_tools=[])


def _require_member_manager(actor: Actor, *, touches_owner: bool) -> None:
    if not actor.can(Role.ADMIN):
        raise PermissionDenied("Only admins and owners manage members.")
    if touches_owner and not actor.can(Role.OWNER):
        raise PermissionDenied("Only owners grant, change or remove the owner role.")


def _is_last_owner(membership: Membership) -> bool:
    return (
        membership.role == Role.OWNER
        and not Membership.objects.filter(tenant_id=membership.tenant_id, role=Role.OWNER)
        .exclude(pk=membership.pk)
        .exists()
    )


def member_role_set(*, actor: Actor, membership: Membership, role: str) -> Membership:
    if role not in Role.values:
        raise ValidationError({"role": [f"Choose one of {', '.join(Role.values)}."]})
    _require_member_manager(actor, touches_owner=Role.OWNER in (role, membership.role))
    if role != Role.OWNER and _is_last_owner(membership):
        raise ValidationError({"role": ["A tenant keeps at least one owner; make someone else owner first."]})
    return membership_role_update(membership=membership, role=role)


def member_remove(*, actor: Actor, membership: Membership) -> None:
    _require_member_manager(actor, touches_owner=membership.role == Role.OWNER)
    if _is_last_owner(membership):
        raise ValidationError({"non_field_errors": ["The last owner cannot be removed."]})
    membership_delete(membership=membership)


def tenant_limits_update(*, actor: Actor, limits: dict[str, int]) -> dict[str, Any]:
    """Owners set the tenant's limits (``tenants.limits``); each is a positive whole number."""
    if not actor.can(Role.OWNER):
        raise PermissionDenied("Only owners change the tenant's limits.")
    errors: dict[str, list[str]] = {}
    for name, value in limits.items():
        if name not in EDITABLE_LIMITS:
            errors[name] = ["Unknown limit."]
        elif (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not LIMIT_RANGE[0] <= value <= LIMIT_RANGE[1]
        ):
            errors[name] = [f"Must be a whole number between {LIMIT_RANGE[0]} and {LIMIT_RANGE[1]:,}."]
    if errors:
        raise ValidationError(errors)
    tenant = actor.tenant
    tenant.settings = {**(tenant.settings or {}), **limits}
    tenant.save(update_fields=["settings"])
    return tenant.settings


def api_key_create_for_actor(*, actor: Actor, name: str, scope: str, expires_in_days: int | None) -> str:
    """A key of the actor's own in the current tenant (settings and account pages); its plaintext,
    which exists only now."""
    expires_at = timezone.now() + timedelta(days=expires_in_days) if expires_in_days else None
    created = api_key_create(
        tenant=actor.tenant, created_by=actor.user, name=name, scope=scope, expires_at=expires_at
    )
    return created.plaintext


def mcp_server_save_and_check(
    *, actor: Actor, server: McpServer | None, fields: dict[str, Any]
) -> tuple[McpServer, bool]:
    """Create or update a server, then (if enabled) connect once to record its health and tools.

    Also says whether the check was put off: the server's threads for outside waits were all
    taken (``ServerBusy``); the scheduled check reaches it within minutes.
    """
    if server is None:
        saved = mcp_server_create(actor=actor, **fields)
    else:
        saved = mcp_server_update(actor=actor, server=server, **fields)
    if not saved.is_enabled:
        return saved, False
    try:
        mcp_server_check(saved)
    except ServerBusy:
        return saved, True
    return saved, False


@transaction.atomic
def session_start(*, actor: Actor, agent: Agent, content: str = "") -> Session:
    """A new chat with the agent, with its first message when one was typed (all or nothing)."""
    session = session_create(actor=actor, agent=agent)
    if content.strip():
        session_post_message(actor=actor, session=session, content=content)
    return session


def account_password_change(*, request: HttpRequest, form: PasswordChangeForm) -> None:
    """Save a validated new password; this browser stays signed in, every other one is signed out."""
    update_session_auth_hash(request, form.save())


def account_sign_out_other_sessions(*, request: HttpRequest, user: User, password: str) -> None:
    """Sign the user out everywhere but here, whatever the session backend.

    Django ties each session to a hash of the stored password: storing the same password
    with a new salt leaves every other session's hash stale, so it is flushed on its next
    request. The password is asked again so that a stolen session cannot lock its owner out.
    """
    if not user.check_password(password):
        raise ValidationError({"password": ["That is not your current password."]})
    user.set_password(password)
    user.save(update_fields=["password"])
    update_session_auth_hash(request, user)
