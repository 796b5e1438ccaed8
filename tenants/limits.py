"""Per-tenant limits and defaults kept in ``Tenant.settings``, with their defaults."""

from typing import Any

from tenants.models import Tenant

DEFAULT_LIMITS: dict[str, Any] = {
    "max_agents": 200,
    "run_timeout_seconds": 600,
}


def tenant_limit(tenant: Tenant, name: str) -> Any:
    return (tenant.settings or {}).get(name, DEFAULT_LIMITS[name])
