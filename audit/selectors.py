"""Reading the audit log: a tenant's owners and admins, their tenant's entries only."""

from datetime import date, datetime, time, timedelta
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404
from django.utils import timezone

from audit.models import AuditEntry
from tenants.actors import Actor
from tenants.models import Role

# User ids are 32-bit (django.contrib.auth's AutoField): a longer number names nobody.
MAX_USER_ID = 2**31 - 1


def _require_reader(actor: Actor) -> None:
    if not actor.can(Role.ADMIN):
        raise PermissionDenied("Only owners and admins read the audit log.")


def _start_of(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


def audit_entry_list_for_actor(
    *,
    actor: Actor,
    user: str = "",
    object_type: str = "",
    since: date | None = None,
    until: date | None = None,
) -> QuerySet[AuditEntry]:
    """The tenant's entries, newest first. ``user``: a user id or an e-mail address (also of
    a deleted user); ``since`` and ``until``: days, both included."""
    _require_reader(actor)
    entries = AuditEntry.objects.filter(tenant=actor.tenant).select_related("actor")
    user = user.strip()
    if user:
        by_user = Q(actor_label__iexact=user) | Q(actor__email__iexact=user)
        if user.isascii() and user.isdigit() and int(user) <= MAX_USER_ID:
            by_user |= Q(actor_id=int(user))
        entries = entries.filter(by_user)
    if object_type:
        entries = entries.filter(object_type=object_type)
    if since is not None:
        entries = entries.filter(created_at__gte=_start_of(since))
    if until is not None and until < date.max:
        entries = entries.filter(created_at__lt=_start_of(until + timedelta(days=1)))
    return entries


def audit_object_types_for_actor(*, actor: Actor) -> list[str]:
    """The object types the tenant's log holds, for a filter's choices."""
    _require_reader(actor)
    types = AuditEntry.objects.filter(tenant=actor.tenant).values_list("object_type", flat=True)
    return sorted(set(types))


def audit_entry_get_for_actor(*, actor: Actor, entry_id: UUID | str) -> AuditEntry:
    """The tenant's entry; a missing one and another tenant's one both raise 404."""
    _require_reader(actor)
    try:
        return AuditEntry.objects.select_related("actor").get(tenant=actor.tenant, pk=UUID(str(entry_id)))
    except (AuditEntry.DoesNotExist, ValueError) as error:
        raise Http404("Audit entry not found") from error
