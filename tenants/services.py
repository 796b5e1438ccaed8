from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

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
    Membership.objects.create(tenant=tenant, user=owner, role=Role.OWNER)
    return tenant


def membership_set(*, tenant: Tenant, user: User, role: str) -> Membership:
    membership, _ = Membership.objects.update_or_create(tenant=tenant, user=user, defaults={"role": role})
    return membership


def api_key_create(
    *,
    tenant: Tenant,
    created_by: User,
    name: str,
    scope: str = ApiKeyScope.WRITE,
    expires_at: datetime | None = None,
) -> CreatedApiKey:
    """Create a key; its plaintext exists only in the returned value."""
    generated = generate_key()
    api_key = ApiKey.objects.create(
        tenant=tenant,
        name=name,
        prefix=generated.prefix,
        secret_hash=hash_secret(generated.secret),
        scope=scope,
        created_by=created_by,
        expires_at=expires_at,
    )
    return CreatedApiKey(api_key=api_key, plaintext=generated.plaintext)


def api_key_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(revoked_at=api_key.revoked_at)
    return api_key


def active_tenant_set(*, request: object, actor: Actor) -> None:
    request.session[ACTIVE_TENANT_SESSION_KEY] = str(actor.tenant.pk)  # type: ignore[attr-defined]
