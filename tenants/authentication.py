from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from audit.context import audit_context_use_api_key
from sessions.statements.post_reads import api_key_with_creator
from tenants.api_keys import secret_matches, split_key
from tenants.models import ApiKey
from tenants.sign_in_throttle import api_key_failure_record, client_address

TOO_MANY_WRONG_KEYS = "Too many requests with a wrong API key from this address."
# Writing last_used_at on every request would turn each read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def authenticate_api_key(plaintext: str) -> ApiKey | None:
    """The active key matching ``plaintext`` with its tenant, creator and ``creator_role``, or None.
    Touches last_used_at."""
    parts = split_key(plaintext)
    if parts is None:
        return None
    prefix, secret = parts
    found = api_key_with_creator(prefix)
    if found is None:
        return None
    api_key, creator_role = found
    api_key.creator_role = creator_role
    if not secret_matches(secret, api_key.secret_hash) or not api_key.is_active:
        return None
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


@dataclass(frozen=True)
class ApiKeyCheck:
    """A key presented from an address: the key if it is valid; if not, how long the address must
    wait when it sent too many wrong keys (0 while it has not)."""

    api_key: ApiKey | None
    retry_after: int = 0


def api_key_check(*, plaintext: str, address: str) -> ApiKeyCheck:
    """``authenticate_api_key``; a wrong key counts against ``address``, and past the address's
    limit it answers how long to wait."""
    api_key = authenticate_api_key(plaintext)
    if api_key is not None:
        return ApiKeyCheck(api_key=api_key)
    return ApiKeyCheck(api_key=None, retry_after=api_key_failure_record(address=address))


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
        check = api_key_check(plaintext=token.strip(), address=client_address(request))
        if check.retry_after:
            raise exceptions.Throttled(wait=check.retry_after, detail=TOO_MANY_WRONG_KEYS)
        api_key = check.api_key
        if api_key is None:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked API key.")
        audit_context_use_api_key(user=api_key.created_by, api_key_prefix=api_key.prefix)
        return api_key.created_by, api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    target_class = "tenants.authentication.ApiKeyAuthentication"
    name = "ApiKeyAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "An Agentry API key (agt_…)."}
