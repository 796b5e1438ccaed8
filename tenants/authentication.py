from datetime import timedelta
from functools import cache
from typing import Any

from django.contrib.auth import get_user_model
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from core.api.throttling import token_ident
from core.prepared import prepared_cursor
from core.rows import column_count, column_list, instance_from_row
from tenants.api_keys import secret_matches, split_key
from tenants.models import ApiKey, Membership, Tenant

# Writing last_used_at on every request would turn each read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def authenticate_api_key(plaintext: str) -> ApiKey | None:
    """The active key matching ``plaintext``, or None. Touches last_used_at."""
    parts = split_key(plaintext)
    if parts is None:
        return None
    prefix, secret = parts
    api_key = _api_key_with_prefix(prefix)
    if api_key is None or not secret_matches(secret, api_key.secret_hash) or not api_key.is_active:
        return None
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


@cache
def _key_query() -> str:
    user_model = get_user_model()
    return (
        f"SELECT {column_list(ApiKey, 'k')}, {column_list(Tenant, 't')}, {column_list(user_model, 'u')},"  # noqa: S608
        f" (SELECT m.role FROM {Membership._meta.db_table} m"
        "   WHERE m.tenant_id = k.tenant_id AND m.user_id = k.created_by_id LIMIT 1)"
        f" FROM {ApiKey._meta.db_table} k"
        f" JOIN {Tenant._meta.db_table} t ON t.id = k.tenant_id"
        f" JOIN {user_model._meta.db_table} u ON u.id = k.created_by_id"
        " WHERE k.prefix = %s"
    )


def _api_key_with_prefix(prefix: str) -> ApiKey | None:
    """The key with its tenant, its creator and the creator's role in one statement.

    Every API request starts here, so the statement is written out rather than compiled by
    the ORM on each request (``tests/test_auth_api_keys.py`` pins it to the ORM's answer).
    The key acts with the creator's role (``tenants.actors.actor_for_api_key``).
    """
    with prepared_cursor() as cursor:
        cursor.execute(_key_query(), [prefix])
        row = cursor.fetchone()
    if row is None:
        return None
    key_end = column_count(ApiKey)
    tenant_end = key_end + column_count(Tenant)
    api_key = instance_from_row(ApiKey, row[:key_end])
    api_key.tenant = instance_from_row(Tenant, row[key_end:tenant_end])
    api_key.created_by = instance_from_row(get_user_model(), row[tenant_end:-1])
    api_key.creator_role = row[-1]
    return api_key


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer agt_…``."""

    keyword = "bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = authentication.get_authorization_header(request).decode("latin-1")
        if not header:
            return None
        keyword, _, token = header.partition(" ")
        if keyword.lower() != self.keyword:
            return None
        token = token.strip()
        api_key = authenticate_api_key(token)
        if api_key is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API key.")
        api_key.rate_limit_ident = token_ident(token)
        return api_key.created_by, api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An Agentry API key (agt_…)."}
