"""Who is acting, in which tenant, with which role: resolved once per request.

This is the one place tenant scoping starts. Selectors take the actor first and only
ever return rows of ``actor.tenant``.
"""

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from tenants.models import ApiKey, ApiKeyScope, Membership, Role, Tenant, role_at_least

ACTIVE_TENANT_SESSION_KEY = "active_tenant_id"


@dataclass(frozen=True)
class Actor:
    user: Any
    tenant: Tenant
    role: str
    api_key: ApiKey | None = None

    def can(self, required_role: str) -> bool:
        return role_at_least(self.role, required_role)

    @property
    def user_id(self) -> int:
        return int(self.user.pk)


def actor_for_api_key(api_key: ApiKey) -> Actor | None:
    """The key acts with its creator's role (as read when it authenticated), capped at viewer for
    read-only keys; None once the creator is no longer a member."""
    if api_key.creator_role is None:
        return None
    role = api_key.creator_role if api_key.scope == ApiKeyScope.WRITE else Role.VIEWER
    return Actor(user=api_key.created_by, tenant=api_key.tenant, role=role, api_key=api_key)


def actor_for_user(
    user: AbstractBaseUser | AnonymousUser, *, preferred_tenant_id: str | None
) -> Actor | None:
    """A browser user acts in the tenant they chose last, else their first one."""
    if not user.is_authenticated:
        return None
    memberships = Membership.objects.filter(user_id=user.pk).select_related("tenant").order_by("created_at")
    chosen = None
    if preferred_tenant_id:
        try:
            chosen = memberships.filter(tenant_id=UUID(str(preferred_tenant_id))).first()
        except ValueError:
            chosen = None
    if chosen is None:
        chosen = memberships.first()
    if chosen is None:
        return None
    return Actor(user=user, tenant=chosen.tenant, role=chosen.role)


def actor_from_request(request: Any) -> Actor | None:
    """Resolve (and cache on the request) the actor of a DRF or Django request."""
    if hasattr(request, "_agentry_actor"):
        cached: Actor | None = request._agentry_actor
        return cached
    auth = getattr(request, "auth", None)
    if isinstance(auth, ApiKey):
        actor = actor_for_api_key(auth)
    else:
        session = getattr(request, "session", None)
        preferred = session.get(ACTIVE_TENANT_SESSION_KEY) if session is not None else None
        actor = actor_for_user(request.user, preferred_tenant_id=preferred)
    request._agentry_actor = actor
    return actor
