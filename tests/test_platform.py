"""Health, schema, settings and management commands."""

import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.cache.backends.redis import RedisCache
from django.core.management import call_command
from rest_framework.test import APIClient

from agents.models import Agent
from tenants.models import ApiKey, Membership, Role, Tenant

ROOT = Path(__file__).resolve().parent.parent


def test_healthz_is_ok(client: object) -> None:
    response = client.get("/healthz")  # type: ignore[attr-defined]

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_checks_database_redis_broker_and_channel_layer(client: object) -> None:
    response = client.get("/readyz")  # type: ignore[attr-defined]

    body = response.json()
    assert response.status_code == 200
    assert body["status"] == "ok"
    redis_checks = ["redis"] if settings.REDIS_URL else []
    assert list(body["checks"]) == ["database", *redis_checks, "broker", "channel_layer"]
    assert all(check["ok"] for check in body["checks"].values())


def test_unknown_api_url_answers_json_404(client: object) -> None:
    response = client.get("/api/v1/no-such-thing/")  # type: ignore[attr-defined]

    assert response.status_code == 404
    assert response.json() == {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}


@pytest.mark.django_db
def test_schema_is_valid_openapi_and_documents_endpoints_auth_and_errors() -> None:
    from openapi_spec_validator import validate

    response = APIClient().get("/api/v1/schema/")
    schema = yaml.safe_load(response.content)

    validate(schema)
    assert response.status_code == 200
    assert {"/api/v1/agents/", "/api/v1/agents/{id}/"} <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["ApiKeyAuth"]["scheme"] == "bearer"
    assert schema["components"]["schemas"]["Error"]["required"] == ["error"]
    create = schema["paths"]["/api/v1/agents/"]["post"]
    assert create["responses"]["400"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    assert (
        "401" in create["responses"] and "404" in schema["paths"]["/api/v1/agents/{id}/"]["get"]["responses"]
    )


@pytest.mark.django_db
def test_docs_page_loads_swagger_ui_from_the_projects_own_static_files(client: object) -> None:
    response = client.get("/api/v1/docs/")  # type: ignore[attr-defined]
    page = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)

    assert response.status_code == 200
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in sources
    assert [source for source in sources if "//" in source] == []
    for source in sources:
        assert client.get(source).status_code == 200, source  # type: ignore[attr-defined]


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS", "FIELD_ENCRYPTION_KEYS"])
def test_production_start_up_names_the_missing_variable(missing: str, tmp_path: Path) -> None:
    env = {
        "PATH": os.environ["PATH"],
        "DEBUG": "false",
        "SECRET_KEY": "s" * 50,
        "ALLOWED_HOSTS": "example.com",
        "FIELD_ENCRYPTION_KEYS": "Vm1Ldk9TQ0hYcWJzcm5rZGhWT2ZwbGZ4T1ZhRlJ3S3U=",
        "AGENTRY_DATA_DIR": str(tmp_path),
    }
    del env[missing]

    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert result.returncode != 0
    assert f"{missing} is not set. It is required with DEBUG=false (production)" in result.stderr


@pytest.mark.parametrize(("value", "is_refused"), [("true", True), ("false", False)])
def test_the_removed_mcp_private_networks_switch_stops_start_up_when_on(
    value: str, is_refused: bool, tmp_path: Path
) -> None:
    env = {"PATH": os.environ["PATH"], "AGENTRY_DATA_DIR": str(tmp_path), "MCP_ALLOW_PRIVATE_NETWORKS": value}

    result = subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    message = (
        "MCP_ALLOW_PRIVATE_NETWORKS was removed: "
        "list the private MCP hosts to allow in MCP_ALLOWED_PRIVATE_HOSTS"
    )
    assert (result.returncode != 0, message in result.stderr) == (is_refused, is_refused)


@pytest.mark.django_db
def test_create_tenant_prints_the_key_alone_on_the_last_line() -> None:
    output = StringIO()

    call_command("create_tenant", "acme", "--owner", "Owner@Acme.test", "--api-key", stdout=output)

    last_line = output.getvalue().strip().splitlines()[-1]
    tenant = Tenant.objects.get(slug="acme")
    assert Membership.objects.get(tenant=tenant).role == Role.OWNER
    assert Membership.objects.get(tenant=tenant).user.email == "owner@acme.test"
    assert last_line.startswith("agt_")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {last_line}")
    assert client.get("/api/v1/agents/").status_code == 200
    assert ApiKey.objects.filter(tenant=tenant).count() == 1


@pytest.mark.django_db
def test_create_tenant_refuses_a_taken_slug() -> None:
    call_command("create_tenant", "acme", "--owner", "a@acme.test", stdout=StringIO())

    with pytest.raises(Exception, match="already exists"):
        call_command("create_tenant", "acme", "--owner", "b@acme.test", stdout=StringIO())
    assert Tenant.objects.count() == 1


@pytest.mark.django_db
def test_seed_demo_is_idempotent() -> None:
    call_command("seed_demo", stdout=StringIO())
    output = StringIO()
    call_command("seed_demo", stdout=output)

    assert Tenant.objects.filter(slug="demo").count() == 1
    assert Agent.objects.filter(tenant__slug="demo").count() == 1
    assert Agent.objects.get(tenant__slug="demo").model_provider == "offline"
    assert "demo@agentry.local" in output.getvalue()


def test_redis_cache_objects_share_one_connection_pool_per_process() -> None:
    """Django builds a cache object per ASGI request; the connection pool must not follow."""
    options = {"OPTIONS": {"pool_class": "core.cache.SharedConnectionPool", "socket_timeout": 2.0}}
    first = RedisCache("redis://127.0.0.1:6379/9", options)
    second = RedisCache("redis://127.0.0.1:6379/9", options)
    other_database = RedisCache("redis://127.0.0.1:6379/10", options)

    def pool_of(cache: RedisCache) -> object:
        return cache._cache.get_client(write=True).connection_pool

    assert first._cache is not second._cache
    assert pool_of(first) is pool_of(second)
    assert pool_of(other_database) is not pool_of(first)
