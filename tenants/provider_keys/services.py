"""Writes to a tenant's provider keys, with field-level errors. Owners and admins only.

Nothing here returns, logs or echoes a key: the log names the tenant, the provider and who
acted.
"""

import logging
import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from audit.models import AuditAction
from audit.services import audit_record, audit_values
from tenants.actors import Actor
from tenants.models import KeyProvider, ProviderKey, Role
from tenants.provider_keys.outbound import BaseUrlRefused, check_base_url

logger = logging.getLogger(__name__)

MAX_API_KEY_LENGTH = 4000
MAX_BASE_URL_LENGTH = 200  # ProviderKey.base_url's column
# Keys and URLs are single tokens: whitespace or control characters inside one mean a bad paste.
WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")
# A key travels in an HTTP header, which carries ASCII only.
NOT_ASCII = "Must contain only ASCII letters, digits and symbols."
AUDITED_FIELDS = ("provider", "api_key", "base_url")
PROVIDER_TAKEN = "This tenant already has a key for this provider: replace it or delete it first."


def provider_key_create(*, actor: Actor, provider: str, api_key: str, base_url: str = "") -> ProviderKey:
    _require_manager(actor)
    provider_key = ProviderKey(
        tenant=actor.tenant, provider=provider, api_key=api_key.strip(), base_url=base_url.strip()
    )
    _validate(provider_key)
    try:
        with transaction.atomic():
            provider_key.save()
            _record(provider_key, AuditAction.CREATE, before=None)
    except IntegrityError as error:  # a concurrent add took the provider between check and save
        raise ValidationError({"provider": [PROVIDER_TAKEN]}) from error
    _log_change(actor, provider_key, "added")
    return provider_key


def provider_key_update(
    *, actor: Actor, provider_key: ProviderKey, api_key: str | None = None, base_url: str | None = None
) -> ProviderKey:
    """Replace the key, the base URL or both; ``None`` keeps the current value."""
    _require_manager(actor)
    before = audit_values(provider_key, AUDITED_FIELDS)
    if api_key is not None:
        provider_key.api_key = api_key.strip()
    if base_url is not None:
        provider_key.base_url = base_url.strip()
    _validate(provider_key)
    with transaction.atomic():
        provider_key.save()
        _record(provider_key, AuditAction.UPDATE, before=before)
    _log_change(actor, provider_key, "replaced" if api_key is not None else "updated")
    return provider_key


def provider_key_save(*, actor: Actor, provider: str, api_key: str, base_url: str = "") -> ProviderKey:
    """Add the tenant's key for ``provider``, or replace the one it has (the settings page's form)."""
    existing = ProviderKey.objects.filter(tenant=actor.tenant, provider=provider).first()
    if existing is None:
        return provider_key_create(actor=actor, provider=provider, api_key=api_key, base_url=base_url)
    return provider_key_update(actor=actor, provider_key=existing, api_key=api_key, base_url=base_url)


def provider_key_save_checked(*, provider_key: ProviderKey) -> ProviderKey:
    """Save a key a form has built and checked (the admin), and record it.

    The form has already changed the instance, so the values before come from the stored row.
    """
    stored = None if provider_key._state.adding else ProviderKey.objects.filter(pk=provider_key.pk).first()
    with transaction.atomic():
        provider_key.save()
        if stored is None:
            _record(provider_key, AuditAction.CREATE, before=None)
        else:
            _record(provider_key, AuditAction.UPDATE, before=audit_values(stored, AUDITED_FIELDS))
    return provider_key


def provider_key_delete(*, actor: Actor, provider_key: ProviderKey) -> None:
    _require_manager(actor)
    # Logged first: deleting clears the primary key.
    _log_change(actor, provider_key, "deleted")
    with transaction.atomic():
        _record(provider_key, AuditAction.DELETE, before=audit_values(provider_key, AUDITED_FIELDS))
        provider_key.delete()


def _record(provider_key: ProviderKey, action: str, *, before: dict[str, Any] | None) -> None:
    audit_record(
        tenant=provider_key.tenant,
        action=action,
        object_type="provider_key",
        object_id=provider_key.pk,
        object_label=provider_key.get_provider_display(),
        before=before,
        after=None if action == AuditAction.DELETE else audit_values(provider_key, AUDITED_FIELDS),
        secret_fields=("api_key",),
    )


def _require_manager(actor: Actor) -> None:
    if not actor.can(Role.ADMIN):
        raise PermissionDenied("Only owners and admins manage provider keys.")


def _log_change(actor: Actor, provider_key: ProviderKey, change: str) -> None:
    logger.info(
        "provider key %s (%s) %s in tenant %s by user %s",
        provider_key.pk,
        provider_key.provider,
        change,
        actor.tenant.slug,
        actor.user_id,
    )


def _validate(provider_key: ProviderKey) -> None:
    errors: dict[str, list[str]] = {}
    if provider_key.provider not in KeyProvider.values:
        errors["provider"] = [f"Choose one of {', '.join(KeyProvider.values)}."]
    elif (
        ProviderKey.objects.filter(tenant_id=provider_key.tenant_id, provider=provider_key.provider)
        .exclude(pk=provider_key.pk)
        .exists()
    ):
        errors["provider"] = [PROVIDER_TAKEN]
    api_key_problem = _api_key_problem(provider_key.api_key)
    if api_key_problem:
        errors["api_key"] = [api_key_problem]
    base_url_problem = _base_url_problem(provider_key.base_url)
    if base_url_problem:
        errors["base_url"] = [base_url_problem]
    if errors:
        raise ValidationError(errors)


def _api_key_problem(api_key: str) -> str:
    if not api_key:
        return "Required."
    if len(api_key) > MAX_API_KEY_LENGTH:
        return f"At most {MAX_API_KEY_LENGTH} characters."
    if WHITESPACE_OR_CONTROL.search(api_key):
        return "Must not contain spaces or control characters."
    if not api_key.isascii():
        return NOT_ASCII
    return ""


def _base_url_problem(url: str) -> str:
    """Why ``url`` cannot be a base URL, or "" (an empty one means the platform's default)."""
    if not url:
        return ""
    if len(url) > MAX_BASE_URL_LENGTH:
        return f"At most {MAX_BASE_URL_LENGTH} characters."
    if WHITESPACE_OR_CONTROL.search(url):
        return "Must not contain spaces or control characters."
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for an invalid port
    except ValueError:
        return "Not a valid URL."
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Must be an https:// URL with a host."
    if parts.username or parts.password:
        return "Put the key in the API key field, not in the URL (the URL is not stored encrypted)."
    try:
        check_base_url(url)
    except BaseUrlRefused as refusal:
        return str(refusal)
    return ""
