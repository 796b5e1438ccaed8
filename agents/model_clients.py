"""Chooses and configures the model client for an agent's provider (the Django side of §7)."""

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from django.conf import settings

from agents.models import ModelProvider
from agents.runtime.offline import OfflineModelClient
from agents.runtime.providers import AnthropicModelClient, OpenAIModelClient
from agents.runtime.types import ModelClient
from tenants.models import ProviderKey, Tenant


class ProviderNotConfigured(Exception):
    """The agent's provider has no API key: neither the tenant's own nor the platform's."""


@dataclass(frozen=True)
class ProviderAccess:
    api_key: str
    base_url: str | None


def provider_access(*, tenant: Tenant, provider: str) -> ProviderAccess:
    """The tenant's own key when it stored one, else the platform's."""
    tenant_key = ProviderKey.objects.filter(tenant=tenant, provider=provider).first()
    platform_keys = {
        ModelProvider.ANTHROPIC: (settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL),
        ModelProvider.OPENAI: (settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL),
    }
    platform_key, platform_base_url = platform_keys[ModelProvider(provider)]
    if tenant_key is not None and tenant_key.api_key:
        return ProviderAccess(api_key=tenant_key.api_key, base_url=tenant_key.base_url or platform_base_url)
    if not platform_key:
        raise ProviderNotConfigured(
            f"No API key for {provider}: set {provider.upper()}_API_KEY or store a key for this tenant."
        )
    return ProviderAccess(api_key=platform_key, base_url=platform_base_url)


def model_client_for(*, tenant: Tenant, agent_config: dict[str, Any]) -> ModelClient:
    provider = agent_config["model_provider"]
    if provider == ModelProvider.OFFLINE:
        return OfflineModelClient()
    access = provider_access(tenant=tenant, provider=provider)
    return _hosted_client(
        provider, access.api_key, access.base_url, settings.MODEL_MAX_RETRIES, settings.MODEL_TIMEOUT_SECONDS
    )


@lru_cache(maxsize=64)
def _hosted_client(
    provider: str, api_key: str, base_url: str | None, max_retries: int, timeout_seconds: float
) -> ModelClient:
    """One SDK client per process and credentials: building one loads the CA bundle (~20 ms),
    and a kept client reuses its connections between runs. The SDK clients are thread-safe."""
    client_class = AnthropicModelClient if provider == ModelProvider.ANTHROPIC else OpenAIModelClient
    return client_class(
        api_key=api_key, base_url=base_url, max_retries=max_retries, timeout_seconds=timeout_seconds
    )
