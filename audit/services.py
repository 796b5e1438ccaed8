"""Recording audit entries: the one helper every write service calls.

``audit_record`` takes the object's field values before and after the write (``None``
before a create, after a delete), keeps the fields that differ as ``{field: [old, new]}``
and stores one entry in the caller's transaction, so an entry exists exactly when its
write is committed. Who and from where come from the request (``audit.context``).
Secrets never reach the table: the fields a caller names in ``secret_fields`` read
``"[redacted]"`` (or their empty value when unset), and every other value goes through
``core.redaction.redact_secrets``, which masks nested keys named like secrets.
"""

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model

from audit.context import audit_context
from audit.models import AuditAction, AuditEntry, AuditSource
from core.redaction import redact_secrets
from tenants.models import Tenant

REDACTED = "[redacted]"
SYSTEM_LABEL = "system"
MAX_LABEL_LENGTH = 200


def audit_values(instance: Model, fields: Iterable[str]) -> dict[str, Any]:
    """The named attributes of ``instance`` as JSON values (related objects by their label)."""
    return {name: _json_value(getattr(instance, name)) for name in fields}


def _json_value(value: Any) -> Any:
    if isinstance(value, Model):
        return str(value)
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def _shown(name: str, value: Any, secret_fields: Collection[str]) -> Any:
    if name in secret_fields:
        return REDACTED if value else value
    return redact_secrets(value)


def audit_changes(
    before: Mapping[str, Any] | None, after: Mapping[str, Any] | None, *, secret_fields: Collection[str] = ()
) -> dict[str, list[Any]]:
    """``{field: [old, new]}`` for the fields that differ, secrets redacted."""
    old_values = before or {}
    new_values = after or {}
    changes = {}
    for name in [*old_values, *(name for name in new_values if name not in old_values)]:
        old, new = old_values.get(name), new_values.get(name)
        if old != new:
            changes[name] = [_shown(name, old, secret_fields), _shown(name, new, secret_fields)]
    return changes


def _user_label(user: Any) -> str:
    return str(getattr(user, "email", "") or getattr(user, "username", "") or user.pk)


def audit_record(
    *,
    tenant: Tenant | None,
    action: str,
    object_type: str,
    object_id: object,
    object_label: str,
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    secret_fields: Collection[str] = (),
    user: Any = None,
) -> AuditEntry | None:
    """Store one audit entry for a write, in the caller's transaction; an update that
    changed nothing stores none (and returns ``None``).

    ``action`` is an ``AuditAction`` (create, update, delete); ``object_type`` a short
    stable name (``agent``, ``mcp_server``, ``budget``…); ``before``/``after`` the values
    of the audited fields (``audit_values``). ``user`` names who acted when the request
    cannot (an invitee accepting while signed out); by default it is the request's user.
    ``tenant`` is None for a change to the platform itself (the price table).
    """
    changes = audit_changes(before, after, secret_fields=secret_fields)
    if action == AuditAction.UPDATE and not changes:
        return None
    context = audit_context()
    acting = user if user is not None else context.user
    if acting is not None and not getattr(acting, "is_authenticated", False):
        acting = None
    return AuditEntry.objects.create(
        tenant=tenant,
        actor=acting,
        actor_label=_user_label(acting) if acting is not None else SYSTEM_LABEL,
        source=context.source,
        api_key_prefix=context.api_key_prefix if context.source == AuditSource.API else "",
        remote_address=context.remote_address,
        action=action,
        object_type=object_type,
        object_id=str(object_id),
        object_label=str(object_label)[:MAX_LABEL_LENGTH],
        changes=changes,
    )
