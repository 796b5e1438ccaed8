from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from audit.models import AuditAction
from audit.services import audit_record, audit_values
from tenants.actors import ACTIVE_TENANT_SESSION_KEY, Actor
from tenants.api_keys import generate_key, hash_secret
from tenants.models import ApiKey, ApiKeyScope, Membership, Role, Tenant


@dataclass(frozen=True)
class CreatedApiKey:
    api_key: ApiKey
    plaintext: str


def user_get_or_create(*, email: str, password: str | None = None) -> tuple[User, bool]:
    """Users sign in with their e-mail, kept as the username too."""
    email = email.strip().lower()
    user = User.objects.filter(username=email).first()
    if user is not None:
        if password:
            user.set_password(password)
            user.save(update_fields=["password"])
        return user, False
    user = User(username=email, email=email)
    if password:
        user.set_password(password)
    else:
        user.set_unusable_password()
    user.save()
    return user, True


@transaction.atomic
def tenant_create(*, slug: str, name: str, owner_email: str, owner_password: str | None = None) -> Tenant:
    tenant = Tenant.objects.create(slug=slug, name=name)
    owner, _ = user_get_or_create(email=owner_email, password=owner_password)
    membership_set(tenant=tenant, user=owner, role=Role.OWNER)
    return tenant


MEMBERSHIP_FIELDS = ("user", "role")
API_KEY_FIELDS = ("name", "prefix", "scope", "expires_at", "revoked_at")


def membership_record(
    membership: Membership, action: str, *, before: dict[str, Any] | None, user: Any = None
) -> None:
    """The audit entry of a membership's change (also written by invitations, which create them)."""
    audit_record(
        tenant=membership.tenant,
        action=action,
        object_type="membership",
        object_id=membership.pk,
        object_label=str(membership.user),
        before=before,
        after=None if action == AuditAction.DELETE else audit_values(membership, MEMBERSHIP_FIELDS),
        user=user,
    )


@transaction.atomic
def membership_set(*, tenant: Tenant, user: User, role: str) -> Membership:
    """Make ``user`` a member of ``tenant`` with ``role``, or give a member that role. The
    rules on who may do it are the interfaces' (``web.services``, the admin, create_tenant)."""
    existing = Membership.objects.filter(tenant=tenant, user=user).select_related("user").first()
    if existing is not None:
        return membership_role_update(membership=existing, role=role)
    membership = Membership.objects.create(tenant=tenant, user=user, role=role)
    membership_record(membership, AuditAction.CREATE, before=None)
    return membership


@transaction.atomic
def membership_role_update(*, membership: Membership, role: str) -> Membership:
    before = audit_values(membership, MEMBERSHIP_FIELDS)
    membership.role = role
    membership.save(update_fields=["role"])
    membership_record(membership, AuditAction.UPDATE, before=before)
    return membership


@transaction.atomic
def membership_delete(*, membership: Membership) -> None:
    membership_record(membership, AuditAction.DELETE, before=audit_values(membership, MEMBERSHIP_FIELDS))
    membership.delete()


def _record_api_key(api_key: ApiKey, action: str, *, before: dict[str, Any] | None) -> None:
    audit_record(
        tenant=api_key.tenant,
        action=action,
        object_type="api_key",
        object_id=api_key.pk,
        object_label=str(api_key),
        before=before,
        after=None if action == AuditAction.DELETE else audit_values(api_key, API_KEY_FIELDS),
    )


def api_key_create(
    *,
    tenant: Tenant,
    created_by: User,
    name: str,
    scope: str = ApiKeyScope.WRITE,
    expires_at: datetime | None = None,
) -> CreatedApiKey:
    """Create a key; its plaintext exists only in the returned value (the audit log has its prefix)."""
    generated = generate_key()
    with transaction.atomic():
        api_key = ApiKey.objects.create(
            tenant=tenant,
            name=name,
            prefix=generated.prefix,
            secret_hash=hash_secret(generated.secret),
            scope=scope,
            created_by=created_by,
            expires_at=expires_at,
        )
        _record_api_key(api_key, AuditAction.CREATE, before=None)
    return CreatedApiKey(api_key=api_key, plaintext=generated.plaintext)


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        before = audit_values(api_key, API_KEY_FIELDS)
        api_key.revoked_at = timezone.now()
        revoked = ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(
            revoked_at=api_key.revoked_at
        )
        if revoked:
            _record_api_key(api_key, AuditAction.UPDATE, before=before)
    return api_key


@transaction.atomic
def api_key_update(*, api_key: ApiKey, name: str, expires_at: datetime | None) -> ApiKey:
    """Rename a key or change its expiry (the admin); the secret and the scope stay."""
    before = audit_values(api_key, API_KEY_FIELDS)
    api_key.name, api_key.expires_at = name, expires_at
    api_key.save(update_fields=["name", "expires_at"])
    _record_api_key(api_key, AuditAction.UPDATE, before=before)
    return api_key


@transaction.atomic
def api_key_delete(*, api_key: ApiKey) -> None:
    _record_api_key(api_key, AuditAction.DELETE, before=audit_values(api_key, API_KEY_FIELDS))
    api_key.delete()


def active_tenant_set(*, request: object, actor: Actor) -> None:
    request.session[ACTIVE_TENANT_SESSION_KEY] = str(actor.tenant.pk)  # type: ignore[attr-defined]
