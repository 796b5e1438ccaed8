"""Memories in the admin (tenant-scoped, editing re-indexes) and in the OpenAPI schema."""

import pytest
import yaml
from django.test import Client
from rest_framework.test import APIClient

from agents.models import Agent
from memory.models import Memory, MemoryStatus
from memory.retrieval import search_memories
from tests.conftest import Cast
from tests.factories import make_agent
from tests.memory.factories import make_memory


def _signed_in(email: str, password: str) -> Client:
    client = Client()
    assert client.login(username=email, password=password)
    return client


def test_the_admin_lists_only_the_users_tenants_memories(cast: Cast, agent: Agent) -> None:
    mine = make_memory(agent=agent, content="Alpha memory")
    theirs = make_memory(agent=make_agent(tenant=cast.tenant_b), content="Beta memory")
    client = _signed_in("alice@a.test", "alice-password")

    page = client.get("/admin/memory/memory/")
    assert page.status_code == 200
    assert b"Alpha memory" in page.content and b"Beta memory" not in page.content
    assert client.get(f"/admin/memory/memory/{theirs.pk}/change/").status_code == 302
    assert client.get(f"/admin/memory/memory/{mine.pk}/change/").status_code == 200
    assert client.get("/admin/memory/memory/add/").status_code == 403


def test_editing_in_the_admin_reindexes_and_records_the_review(cast: Cast, agent: Agent) -> None:
    memory = make_memory(agent=agent, content="The user likes jaz.", status=MemoryStatus.SUGGESTED)
    client = _signed_in("alice@a.test", "alice-password")
    response = client.post(
        f"/admin/memory/memory/{memory.pk}/change/",
        {"type": "preference", "content": "The user likes jazz.", "importance": "0.6", "status": "active"},
    )
    assert response.status_code == 302
    memory.refresh_from_db()
    assert (memory.content, memory.status, memory.reviewed_by_id) == (
        "The user likes jazz.",
        "active",
        cast.alice.pk,
    )
    results = search_memories(tenant=cast.tenant_a, agent=agent, query="jazz")
    assert [item.memory.pk for item in results] == [memory.pk]


@pytest.mark.django_db
def test_the_schema_documents_the_memory_endpoints() -> None:
    from openapi_spec_validator import validate

    response = APIClient().get("/api/v1/schema/")
    schema = yaml.safe_load(response.content)
    validate(schema)
    assert {
        "/api/v1/agents/{agent_pk}/memories/",
        "/api/v1/memories/{id}/",
        "/api/v1/memories/{id}/approve/",
        "/api/v1/memories/{id}/reject/",
        "/api/v1/sessions/{session_pk}/extract-memories/",
    } <= set(schema["paths"])
    assert Memory.objects.count() == 0
