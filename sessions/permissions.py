"""Who may act on a session: the checks the session services share."""

from django.core.exceptions import PermissionDenied

from sessions.models import Session
from tenants.actors import Actor
from tenants.models import Role


def require_role(actor: Actor, role: str) -> None:
    if not actor.can(role):
        raise PermissionDenied("Your role does not allow this action.")


def require_session_owner_or_admin(actor: Actor, session: Session) -> None:
    """Members manage their own sessions; admins and owners manage every session."""
    require_role(actor, Role.MEMBER)
    if session.created_by_id != actor.user_id and not actor.can(Role.ADMIN):
        raise PermissionDenied("Only the session's creator or an admin may do this.")
