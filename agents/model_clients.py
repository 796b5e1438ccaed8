"""Chooses and configures the model client for an agent's provider (the Django side of §7)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import httpx2
from django.conf import settings

from agents.models import ModelProvider
from agents.runtime.offline import OfflineModelClient
from agents.runtime.types import ModelClient, ModelError
from core.outside_waits import waiting_outside
from sessions.statements.run_reads import provider_key
from tenants.models import ProviderKey, Tenant
from tenants.provider_keys.outbound import BaseUrlRefused, PinnedTransport, check_base_url

if TYPE_CHECKING:
    from agents.runtime.providers.anthropic_client import AnthropicModelClient
    from agents.runtime.providers.openai_client import OpenAIModelClient

logger = logging.getLogger(__name__)

# The "test key" call: one attempt, answered quickly or not at all.
PROVIDER_CHECK_TIMEOUT_SECONDS = 10.0


class ProviderNotConfigured(Exception):
    """The agent's provider has no usable API key: neither the tenant's own nor the platform's."""


@dataclass(frozen=True)
class ProviderAccess:
    api_key: str = field(repr=False)
    base_url: str | None
    # A tenant's own base URL: the address the SSRF guard checked, where connections go.
    pinned_address: str | None = None


@dataclass(frozen=True)
class ProviderKeyCheck:
    is_working: bool
    message: str


def provider_access(*, tenant: Tenant, provider: str) -> ProviderAccess:
    """The tenant's own key when it stored one, else the platform's."""
    tenant_key = provider_key(tenant_id=tenant.pk, provider=provider)
    if tenant_key is not None and tenant_key.api_key:
        return provider_key_access(tenant_key)
    platform_key, platform_base_url = _platform_access(provider)
    if not platform_key:
        raise ProviderNotConfigured(
            f"No API key for {provider}: set {provider.upper()}_API_KEY or store a key for this tenant."
        )
    return ProviderAccess(api_key=platform_key, base_url=platform_base_url)


def provider_key_access(provider_key: ProviderKey) -> ProviderAccess:
    """What a call with the tenant's key uses: its own base URL, checked by the SSRF guard each
    time (DNS answers change), or the platform's."""
    if not provider_key.api_key.isascii():  # stored before keys were checked for it
        problem = "has characters an HTTP header cannot carry: replace it."
        raise ProviderNotConfigured(f"The tenant's {provider_key.provider} key {problem}")
    if provider_key.base_url:
        try:
            address = check_base_url(provider_key.base_url)
        except BaseUrlRefused as refusal:
            raise ProviderNotConfigured(f"The tenant's {provider_key.provider} key: {refusal}") from None
        return ProviderAccess(
            api_key=provider_key.api_key, base_url=provider_key.base_url, pinned_address=address
        )
    _, platform_base_url = _platform_access(provider_key.provider)
    return ProviderAccess(api_key=provider_key.api_key, base_url=platform_base_url)


def _platform_access(provider: str) -> tuple[str, str | None]:
    platform_keys = {
        ModelProvider.ANTHROPIC: (settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL),
        ModelProvider.OPENAI: (settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL),
    }
    return platform_keys[ModelProvider(provider)]


def model_client_for(*, tenant: Tenant, agent_config: dict[str, Any]) -> ModelClient:
    provider = agent_config["model_provider"]
    if provider == ModelProvider.OFFLINE:
        return OfflineModelClient()
    access = provider_access(tenant=tenant, provider=provider)
    return _hosted_client(provider, access, settings.MODEL_MAX_RETRIES, settings.MODEL_TIMEOUT_SECONDS)


@lru_cache(maxsize=64)
def _hosted_client(
    provider: str, access: ProviderAccess, max_retries: int, timeout_seconds: float
) -> ModelClient:
    """One SDK client per process and credentials: building one loads the CA bundle (~20 ms),
    and a kept client reuses its connections between runs. The SDK clients are thread-safe.
    A replaced key, or a base URL that now resolves elsewhere, is other access: the next run
    builds a client for it."""
    return _new_client(provider, access, max_retries=max_retries, timeout_seconds=timeout_seconds)


def _new_client(
    provider: str, access: ProviderAccess, *, max_retries: int, timeout_seconds: float
) -> AnthropicModelClient | OpenAIModelClient:
    client_class = _client_class(provider)
    transport = None
    if access.base_url and access.pinned_address:
        transport = PinnedTransport(host=httpx2.URL(access.base_url).host, address=access.pinned_address)
    return client_class(
        api_key=access.api_key,
        base_url=access.base_url,
        max_retries=max_retries,
        timeout_seconds=timeout_seconds,
        transport=transport,
    )


def _client_class(provider: str) -> type[AnthropicModelClient | OpenAIModelClient]:
    """The provider's client class; its SDK is imported here, on first use, not at start-up
    (``manage.py`` commands and most requests never call a model)."""
    if provider == ModelProvider.ANTHROPIC:
        from agents.runtime.providers.anthropic_client import AnthropicModelClient

        return AnthropicModelClient
    from agents.runtime.providers.openai_client import OpenAIModelClient

    return OpenAIModelClient


def provider_key_check(*, provider_key: ProviderKey) -> ProviderKeyCheck:
    """Make one cheap call with the key (list the provider's models) and say whether it worked.

    The answer is generic: what the provider sent back is never echoed; the server log has
    the kind of failure and the status. During a request, raises ``ServerBusy`` when the
    server's threads for outside waits are taken.
    """
    with waiting_outside():  # the key's base URL is resolved, then called
        return _checked(provider_key)


def _checked(provider_key: ProviderKey) -> ProviderKeyCheck:
    try:
        access = provider_key_access(provider_key)
    except ProviderNotConfigured as error:
        return ProviderKeyCheck(is_working=False, message=str(error))
    client = _new_client(
        provider_key.provider, access, max_retries=0, timeout_seconds=PROVIDER_CHECK_TIMEOUT_SECONDS
    )
    try:
        client.check_access()
    except ModelError as error:
        logger.info(
            "provider key %s (%s) of tenant %s failed its check: %s, HTTP status %s",
            provider_key.pk,
            provider_key.provider,
            provider_key.tenant_id,
            error.kind,
            error.status_code,
        )
        return ProviderKeyCheck(is_working=False, message=_check_failure_message(error))
    return ProviderKeyCheck(is_working=True, message="The key works: the provider accepted it.")


def _check_failure_message(error: ModelError) -> str:
    if error.kind == "authentication":
        return "The provider refused this key."
    if error.kind in ("connection", "timeout"):
        return "Could not reach the provider."
    if error.kind == "rate_limited":
        return "The provider is limiting requests for this key: try again in a minute."
    status = f" (HTTP {error.status_code})" if error.status_code else ""
    return f"The provider answered with an error{status}."
