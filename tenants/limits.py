"""Per-tenant limits and defaults kept in ``Tenant.settings``, with their defaults."""

from typing import Any

from tenants.models import Tenant

DEFAULT_LIMITS: dict[str, Any] = {
    "max_agents": 200,
    "run_timeout_seconds": 1800,
    "messages_per_minute_per_user": 20,
    "model_tokens_per_minute": 30_000,
    "active_runs_per_user": 3,
}


def tenant_limit(tenant: Tenant, name: str) -> Any:
    return (tenant.settings or {}).get(name, DEFAULT_LIMITS[name])
