"""The audit log: who changed what, from where, with secrets redacted; read by owners and admins only."""

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.core.serializers.json import DjangoJSONEncoder
from django.test import Client
from django.utils import timezone
from django_q.models import Schedule
from rest_framework.test import APIClient

from agents.models import Agent
from audit.models import AuditEntry
from audit.retention import prune_audit_entries
from mcp_servers.models import McpServer
from mcp_servers.services import mcp_server_create
from sessions.schedules import ensure_schedules
from tenants.actors import Actor, actor_for_user
from tenants.models import ApiKey, Invitation, Membership, ProviderKey
from tenants.services import api_key_create
from tests.conftest import Cast
from tests.factories import make_agent
from tools.models import Tool, ToolKind

pytestmark = pytest.mark.django_db

MCP_TOKEN = "mcp-secret-token-0123456789"
NEW_MCP_TOKEN = "mcp-rotated-token-9876543210"


def actor_of(user: Any) -> Actor:
    actor = actor_for_user(user, preferred_tenant_id=None)
    assert actor is not None
    return actor


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_key_for(cast: Cast, user: Any) -> tuple[APIClient, str]:
    """A client with a fresh key of ``user`` in tenant A, and the key's prefix."""
    created = api_key_create(tenant=cast.tenant_a, created_by=user, name="audit test key")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {created.plaintext}")
    return client, created.api_key.prefix


class NewEntries:
    """The entries written after it was made, oldest first."""

    def __init__(self) -> None:
        self.known = set(AuditEntry.objects.values_list("pk", flat=True))

    def __call__(self) -> list[AuditEntry]:
        return list(AuditEntry.objects.exclude(pk__in=self.known).order_by("created_at", "object_type"))

    def summary(self) -> list[tuple[str, str, str, str]]:
        return [(e.object_type, e.action, e.source, e.actor_label) for e in self()]


def agent_form(agent: Agent, **overrides: str) -> dict[str, str]:
    return {
        "name": agent.name,
        "description": agent.description,
        "goal": agent.goal,
        "system_prompt": agent.system_prompt,
        "model_provider": agent.model_provider,
        "model_name": agent.model_name,
        "temperature": str(agent.temperature),
        "max_steps": str(agent.max_steps),
        "max_tokens": str(agent.max_tokens),
        "tool_profile": "minimal",
        "approval_required_tools": "",
        "run_timeout_seconds": "",
        "context_compaction_enabled": "on" if agent.context_compaction_enabled else "",
        "planning_mode": agent.planning_mode,
        "is_active": "on" if agent.is_active else "",
        **overrides,
    }


# --- The three acceptance cases ------------------------------------------------------------


def test_editing_an_agents_system_prompt_in_the_ui_records_one_entry(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper", system_prompt="Be brief.")
    new = NewEntries()

    response = signed_in(cast.alice).post(
        f"/agents/{agent.pk}/edit/", agent_form(agent, system_prompt="Be brief and kind.")
    )

    assert response.status_code == 302
    [entry] = new()
    assert (entry.tenant_id, entry.actor, entry.actor_label, entry.source, entry.api_key_prefix) == (
        cast.tenant_a.pk,
        cast.alice,
        "alice@a.test",
        "ui",
        "",
    )
    assert (entry.action, entry.object_type, entry.object_id, entry.object_label) == (
        "update",
        "agent",
        str(agent.pk),
        "Helper",
    )
    assert entry.changes == {"system_prompt": ["Be brief.", "Be brief and kind."]}
    assert entry.remote_address == "127.0.0.1"


def test_changing_a_tool_policy_over_the_api_records_one_entry_with_the_key_prefix(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper")
    client, prefix = api_key_for(cast, cast.alice)
    new = NewEntries()

    response = client.patch(
        f"/api/v1/agents/{agent.pk}/tools/", {"profile": "coding", "deny": ["web_fetch"]}, format="json"
    )

    assert response.status_code == 200, response.content
    [entry] = new()
    assert (entry.actor, entry.source, entry.api_key_prefix) == (cast.alice, "api", prefix)
    assert (entry.action, entry.object_type, entry.object_id, entry.object_label) == (
        "update",
        "tool_policy",
        str(agent.pk),
        "Helper",
    )
    assert entry.changes == {"profile": ["minimal", "coding"], "deny": [[], ["web_fetch"]]}


def test_changing_an_mcp_servers_token_in_the_admin_records_one_entry_without_the_token(cast: Cast) -> None:
    server = mcp_server_create(
        actor=actor_of(cast.alice),
        name="docs",
        transport="streamable_http",
        url="https://mcp.example.com/mcp",
        token=MCP_TOKEN,
    )
    new = NewEntries()

    response = signed_in(cast.alice).post(
        f"/admin/mcp_servers/mcpserver/{server.pk}/change/",
        {
            "is_enabled": "on",
            "connect_timeout_seconds": "10",
            "call_timeout_seconds": "60",
            "new_token": NEW_MCP_TOKEN,
        },
    )

    assert response.status_code == 302
    assert McpServer.objects.get(pk=server.pk).token == NEW_MCP_TOKEN
    [entry] = new()
    assert (entry.actor, entry.source, entry.action, entry.object_type, entry.object_label) == (
        cast.alice,
        "admin",
        "update",
        "mcp_server",
        "docs",
    )
    assert entry.changes == {"token": ["[redacted]", "[redacted]"]}
    stored = json.dumps(
        {field.attname: getattr(entry, field.attname) for field in AuditEntry._meta.concrete_fields},
        cls=DjangoJSONEncoder,
    )
    assert MCP_TOKEN not in stored and NEW_MCP_TOKEN not in stored
    assert "mcp-" not in json.dumps(list(AuditEntry.objects.values_list("changes", flat=True)))


# --- Every kind of object -------------------------------------------------------------------


def test_agents_created_and_deleted_over_the_api(cast: Cast) -> None:
    client, prefix = api_key_for(cast, cast.alice)
    new = NewEntries()

    created = client.post("/api/v1/agents/", {"name": "Scout", "system_prompt": "Look."}, format="json")
    client.delete(f"/api/v1/agents/{created.json()['id']}/")

    create, delete = new()
    assert (create.action, create.object_type, create.source, create.api_key_prefix) == (
        "create",
        "agent",
        "api",
        prefix,
    )
    assert create.changes["name"] == [None, "Scout"]
    assert create.changes["system_prompt"] == [None, "Look."]
    assert (delete.action, delete.object_label, delete.changes["name"]) == (
        "delete",
        "Scout",
        ["Scout", None],
    )


def test_http_tools_created_updated_and_deleted_with_secret_headers_redacted(cast: Cast) -> None:
    client, _ = api_key_for(cast, cast.alice)
    new = NewEntries()

    created = client.post(
        "/api/v1/tools/",
        {
            "name": "lookup",
            "url_template": "https://api.example.com/{q}",
            "secret_headers": {"Authorization": "Bearer tool-secret-123"},
        },
        format="json",
    )
    tool_id = created.json()["id"]
    client.patch(f"/api/v1/tools/{tool_id}/", {"description": "Looks things up"}, format="json")
    client.delete(f"/api/v1/tools/{tool_id}/")

    create, update, delete = new()
    assert [(e.object_type, e.action, e.object_id) for e in (create, update, delete)] == [
        ("tool", "create", tool_id),
        ("tool", "update", tool_id),
        ("tool", "delete", tool_id),
    ]
    assert create.changes["secret_headers"] == [None, "[redacted]"]
    assert update.changes == {"description": ["", "Looks things up"]}
    assert "tool-secret-123" not in json.dumps([create.changes, update.changes, delete.changes])


def test_tool_assignments_are_part_of_the_tool_policy_entry(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper")
    tool = Tool.objects.create(
        tenant=cast.tenant_a, name="lookup", kind=ToolKind.HTTP, url_template="https://a.example/"
    )
    client, _ = api_key_for(cast, cast.alice)
    new = NewEntries()

    client.patch(f"/api/v1/agents/{agent.pk}/tools/", {"assigned_tools": [str(tool.pk)]}, format="json")
    client.patch(f"/api/v1/agents/{agent.pk}/tools/", {"assigned_tools": [str(tool.pk)]}, format="json")

    assert [(e.object_type, e.changes) for e in new()] == [
        ("tool_policy", {"assigned_tools": [[], ["lookup"]]})
    ]


def test_mcp_servers_created_and_deleted_over_the_api_without_credentials(cast: Cast) -> None:
    client, _ = api_key_for(cast, cast.alice)
    new = NewEntries()

    created = client.post(
        "/api/v1/mcp-servers/",
        {
            "name": "docs",
            "transport": "streamable_http",
            "url": "https://mcp.example.com/mcp",
            "headers": {"X-Api-Key": "header-secret-1"},
        },
        format="json",
    )
    client.delete(f"/api/v1/mcp-servers/{created.json()['id']}/")

    create, delete = new()
    assert (create.object_type, create.action, delete.action) == ("mcp_server", "create", "delete")
    assert create.changes["headers"] == [None, "[redacted]"]
    assert create.changes["url"] == [None, "https://mcp.example.com/mcp"]
    assert "header-secret-1" not in json.dumps([create.changes, delete.changes])


def test_provider_keys_added_replaced_and_deleted_without_the_key(cast: Cast) -> None:
    client, _ = api_key_for(cast, cast.alice)
    new = NewEntries()

    created = client.post(
        "/api/v1/provider-keys/", {"provider": "anthropic", "api_key": "sk-ant-first-key"}, format="json"
    )
    key_id = created.json()["id"]
    client.patch(f"/api/v1/provider-keys/{key_id}/", {"api_key": "sk-ant-second-key"}, format="json")
    client.delete(f"/api/v1/provider-keys/{key_id}/")

    assert [(e.object_type, e.action, e.changes) for e in new()] == [
        (
            "provider_key",
            "create",
            {"provider": [None, "anthropic"], "api_key": [None, "[redacted]"], "base_url": [None, ""]},
        ),
        ("provider_key", "update", {"api_key": ["[redacted]", "[redacted]"]}),
        (
            "provider_key",
            "delete",
            {"provider": ["anthropic", None], "api_key": ["[redacted]", None], "base_url": ["", None]},
        ),
    ]
    assert not ProviderKey.objects.exists()


def test_member_role_changes_and_removals_in_the_ui(cast: Cast) -> None:
    client = signed_in(cast.alice)
    bob = Membership.objects.get(tenant=cast.tenant_a, user=cast.bob)
    new = NewEntries()

    client.post(f"/settings/members/{bob.pk}/role/", {"role": "admin"})
    client.post(f"/settings/members/{bob.pk}/remove/")

    assert [(e.object_type, e.action, e.source, e.object_label, e.changes) for e in new()] == [
        ("membership", "update", "ui", "bob@a.test", {"role": ["member", "admin"]}),
        ("membership", "delete", "ui", "bob@a.test", {"user": ["bob@a.test", None], "role": ["admin", None]}),
    ]


def test_invitations_created_revoked_and_accepted(cast: Cast) -> None:
    client = signed_in(cast.alice)
    new = NewEntries()

    client.post("/settings/members/", {"email": "first@a.test", "role": "member"})
    first = Invitation.objects.get(email="first@a.test")
    client.post(f"/settings/invitations/{first.pk}/revoke/")
    invited = client.post("/settings/members/", {"email": "dora@a.test", "role": "viewer"})
    link = re.search(r'readonly value="http://testserver(/invitations/[^"]+/)"', invited.content.decode())
    assert link is not None
    Client().post(link.group(1), {"new_password1": "kettle-orbit-57", "new_password2": "kettle-orbit-57"})

    assert [(e.object_type, e.action, e.actor_label, e.object_label) for e in new()] == [
        ("invitation", "create", "alice@a.test", "first@a.test"),
        ("invitation", "update", "alice@a.test", "first@a.test"),
        ("invitation", "create", "alice@a.test", "dora@a.test"),
        ("invitation", "update", "dora@a.test", "dora@a.test"),
        ("membership", "create", "dora@a.test", "dora@a.test"),
    ]
    entries = new()
    assert set(entries[1].changes) == {"revoked_at"}
    assert set(entries[3].changes) == {"accepted_at", "accepted_by"}
    assert entries[4].changes == {"user": [None, "dora@a.test"], "role": [None, "viewer"]}
    token_hashes = Invitation.objects.values_list("token_hash", flat=True)
    assert not any(digest in json.dumps([e.changes for e in entries]) for digest in token_hashes)


def test_api_keys_created_and_revoked_in_the_ui(cast: Cast) -> None:
    client = signed_in(cast.alice)
    new = NewEntries()

    client.post("/settings/api-keys/", {"name": "ci", "scope": "write", "expires_in_days": ""})
    api_key = ApiKey.objects.get(name="ci")
    client.post(f"/settings/api-keys/{api_key.pk}/revoke/")

    create, revoke = new()
    assert (create.object_type, create.action, create.source, create.object_label) == (
        "api_key",
        "create",
        "ui",
        str(api_key),
    )
    assert create.changes["prefix"] == [None, api_key.prefix]
    assert (revoke.action, set(revoke.changes)) == ("update", {"revoked_at"})
    assert api_key.secret_hash not in json.dumps([create.changes, revoke.changes])


def test_admin_edits_of_agents_tools_memberships_and_keys_are_recorded_as_admin(
    cast: Cast, django_user_model: Any
) -> None:
    root = django_user_model.objects.create_superuser("root@x.test", "root@x.test", "root-password")
    agent = make_agent(tenant=cast.tenant_a, name="Helper")
    tool = Tool.objects.create(
        tenant=cast.tenant_a,
        name="lookup",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template="https://a.example/",
    )
    created_key = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="old name")
    bob = Membership.objects.get(tenant=cast.tenant_a, user=cast.bob)
    client = signed_in(root)
    new = NewEntries()

    client.post(
        f"/admin/agents/agent/{agent.pk}/change/",
        {
            **agent_form(agent, name="Helper 2", approval_required_tools="[]"),
            "tenant": str(cast.tenant_a.pk),
            "created_by": "",
        },
    )
    client.post(
        f"/admin/tools/tool/{tool.pk}/change/",
        {"description": "Finds", "is_enabled": "on", "timeout_seconds": "30"},
    )
    client.post(f"/admin/tenants/membership/{bob.pk}/change/", {"role": "viewer"})
    client.post(
        f"/admin/tenants/apikey/{created_key.api_key.pk}/change/",
        {"name": "new name", "expires_at_0": "", "expires_at_1": ""},
    )
    client.post(f"/admin/agents/agent/{agent.pk}/delete/", {"post": "yes"})

    assert [(e.object_type, e.action, e.source, e.actor_label, e.changes) for e in new()][:4] == [
        ("agent", "update", "admin", "root@x.test", {"name": ["Helper", "Helper 2"]}),
        ("tool", "update", "admin", "root@x.test", {"description": ["", "Finds"]}),
        ("membership", "update", "admin", "root@x.test", {"role": ["member", "viewer"]}),
        ("api_key", "update", "admin", "root@x.test", {"name": ["old name", "new name"]}),
    ]
    assert [(e.object_type, e.action) for e in new()][4:] == [("agent", "delete")]
    assert not Agent.objects.filter(pk=agent.pk).exists()


def test_writes_outside_a_request_are_recorded_as_system(cast: Cast) -> None:
    new = NewEntries()

    make_agent(tenant=cast.tenant_a)  # not through a service: nothing recorded
    api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="from a command")

    assert new.summary() == [("api_key", "create", "system", "system")]


def test_a_requests_context_ends_with_the_request(cast: Cast) -> None:
    client, _ = api_key_for(cast, cast.alice)
    client.post("/api/v1/agents/", {"name": "Scout"}, format="json")
    signed_in(cast.alice).get("/agents/")
    new = NewEntries()

    api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="after the requests")

    assert new.summary() == [("api_key", "create", "system", "system")]


def test_an_update_that_changes_nothing_records_nothing(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper")
    new = NewEntries()

    signed_in(cast.alice).post(f"/agents/{agent.pk}/edit/", agent_form(agent))

    assert new() == []


# --- Reading over the API -------------------------------------------------------------------


@pytest.fixture
def logged(cast: Cast) -> dict[str, AuditEntry]:
    """An entry by alice (agent, ten days ago), one by bob (tool policy, today), one in tenant B."""
    old = AuditEntry.objects.create(
        tenant=cast.tenant_a,
        actor=cast.alice,
        actor_label="alice@a.test",
        source="ui",
        action="create",
        object_type="agent",
        object_id="1",
        object_label="Helper",
        created_at=timezone.now() - timedelta(days=10),
        changes={"name": [None, "Helper"]},
    )
    recent = AuditEntry.objects.create(
        tenant=cast.tenant_a,
        actor=cast.bob,
        actor_label="bob@a.test",
        source="api",
        api_key_prefix="abc123",
        action="update",
        object_type="tool_policy",
        object_id="2",
        object_label="Helper",
        changes={"profile": ["minimal", "full"]},
    )
    other = AuditEntry.objects.create(
        tenant=cast.tenant_b,
        actor=cast.carol,
        actor_label="carol@b.test",
        source="ui",
        action="create",
        object_type="agent",
        object_id="3",
        object_label="Carol's agent",
    )
    return {"old": old, "recent": recent, "other": other}


def listed_ids(client: APIClient, query: str = "") -> list[str]:
    response = client.get(f"/api/v1/audit/{query}")
    assert response.status_code == 200, response.content
    return [entry["id"] for entry in response.json()["results"]]


def test_owners_list_their_tenants_entries_newest_first(
    cast: Cast, alice_api: APIClient, logged: dict[str, AuditEntry]
) -> None:
    response = alice_api.get("/api/v1/audit/")

    body = response.json()
    mine = [entry for entry in body["results"] if entry["id"] in {str(e.pk) for e in logged.values()}]
    assert [entry["id"] for entry in mine] == [str(logged["recent"].pk), str(logged["old"].pk)]
    assert mine[0] == {
        "id": str(logged["recent"].pk),
        "created_at": mine[0]["created_at"],
        "actor": cast.bob.pk,
        "actor_label": "bob@a.test",
        "source": "api",
        "api_key_prefix": "abc123",
        "remote_address": "",
        "action": "update",
        "object_type": "tool_policy",
        "object_id": "2",
        "object_label": "Helper",
        "changes": {"profile": ["minimal", "full"]},
    }
    assert str(logged["other"].pk) not in {entry["id"] for entry in body["results"]}


def test_the_list_filters_by_actor_object_type_and_days(
    cast: Cast, alice_api: APIClient, logged: dict[str, AuditEntry]
) -> None:
    old, recent = str(logged["old"].pk), str(logged["recent"].pk)
    today = timezone.now().date()
    five_days_ago = (today - timedelta(days=5)).isoformat()

    assert listed_ids(alice_api, "?actor=bob@a.test") == [recent]
    assert listed_ids(alice_api, f"?actor={cast.bob.pk}") == [recent]
    assert listed_ids(alice_api, "?object_type=agent") == [old]
    assert listed_ids(alice_api, f"?object_type=tool_policy&since={five_days_ago}") == [recent]
    assert old in listed_ids(alice_api, f"?until={five_days_ago}")
    assert recent not in listed_ids(alice_api, f"?until={five_days_ago}")
    assert (
        listed_ids(alice_api, f"?actor=alice@a.test&since={today.isoformat()}&until={today.isoformat()}")
        == []
    )
    assert listed_ids(alice_api, "?actor=&object_type=agent") == [old]
    assert listed_ids(alice_api, "?actor=99999999999999999999999") == []


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("?since=yesterday", {"since"}),
        ("?until=2026-13-01", {"until"}),
        ("?since=2026-05-02&until=2026-05-01", {"until"}),
        ("?object_type=" + "x" * 41, {"object_type"}),
    ],
)
def test_unreadable_filters_are_refused(
    alice_api: APIClient, logged: dict[str, AuditEntry], query: str, fields: set[str]
) -> None:
    response = alice_api.get(f"/api/v1/audit/{query}")

    assert response.status_code == 400
    assert set(response.json()["error"]["fields"]) == fields


def test_members_and_viewers_are_refused(
    bob_api: APIClient, victor_api: APIClient, logged: dict[str, AuditEntry]
) -> None:
    entry = logged["old"].pk

    assert [client.get("/api/v1/audit/").status_code for client in (bob_api, victor_api)] == [403, 403]
    assert [client.get(f"/api/v1/audit/{entry}/").status_code for client in (bob_api, victor_api)] == [
        403,
        403,
    ]


def test_another_tenants_entries_are_404_and_unchanged(
    carol_api: APIClient, logged: dict[str, AuditEntry]
) -> None:
    entry = logged["old"]
    before = AuditEntry.objects.values().get(pk=entry.pk)

    read = carol_api.get(f"/api/v1/audit/{entry.pk}/")
    listed = listed_ids(carol_api)
    writes = [
        carol_api.delete(f"/api/v1/audit/{entry.pk}/").status_code,
        carol_api.patch(f"/api/v1/audit/{entry.pk}/", {"action": "delete"}, format="json").status_code,
    ]

    assert read.status_code == 404
    assert str(entry.pk) not in listed and str(logged["other"].pk) in listed
    assert writes == [405, 405]
    assert AuditEntry.objects.values().get(pk=entry.pk) == before


def test_an_owner_reads_one_entry_and_cannot_write(
    alice_api: APIClient, logged: dict[str, AuditEntry]
) -> None:
    entry = logged["old"]
    count = AuditEntry.objects.count()

    read = alice_api.get(f"/api/v1/audit/{entry.pk}/")
    writes = [
        alice_api.post("/api/v1/audit/", {"action": "create"}, format="json").status_code,
        alice_api.put(f"/api/v1/audit/{entry.pk}/", {"action": "create"}, format="json").status_code,
        alice_api.patch(f"/api/v1/audit/{entry.pk}/", {"action": "create"}, format="json").status_code,
        alice_api.delete(f"/api/v1/audit/{entry.pk}/").status_code,
    ]

    assert (read.status_code, read.json()["object_label"]) == (200, "Helper")
    assert alice_api.get("/api/v1/audit/not-a-uuid/").status_code == 404
    assert writes == [405, 405, 405, 405]
    assert AuditEntry.objects.count() == count


# --- The page and the admin -----------------------------------------------------------------


def test_owners_see_the_audit_page_with_filters(cast: Cast, logged: dict[str, AuditEntry]) -> None:
    client = signed_in(cast.alice)

    page = client.get("/audit/")
    filtered = client.get("/audit/?object_type=agent")
    refused = client.get("/audit/?since=not-a-date")

    body = page.content.decode()
    assert page.status_code == 200
    assert f'id="entry-{logged["recent"].pk}"' in body and f'id="entry-{logged["old"].pk}"' in body
    assert "agt_abc123_…" in body and "Carol&#x27;s agent" not in body
    assert 'href="/audit/"' in body  # in the navigation
    assert f'id="entry-{logged["recent"].pk}"' not in filtered.content.decode()
    assert f'id="entry-{logged["old"].pk}"' in filtered.content.decode()
    assert refused.status_code == 400 and "Enter a valid date." in refused.content.decode()


def test_members_cannot_open_the_audit_page_nor_see_it_in_the_navigation(
    cast: Cast, logged: dict[str, AuditEntry]
) -> None:
    page = signed_in(cast.bob).get("/audit/")
    dashboard = signed_in(cast.bob).get("/").content.decode()

    assert page.status_code == 403
    assert "Helper" not in page.content.decode()
    assert 'href="/audit/"' not in dashboard


def test_another_tenants_owner_sees_only_their_entries(cast: Cast, logged: dict[str, AuditEntry]) -> None:
    body = signed_in(cast.carol).get("/audit/").content.decode()

    assert f'id="entry-{logged["other"].pk}"' in body
    assert f'id="entry-{logged["old"].pk}"' not in body and f'id="entry-{logged["recent"].pk}"' not in body


def test_the_page_is_paginated(cast: Cast) -> None:
    AuditEntry.objects.bulk_create(
        AuditEntry(
            tenant=cast.tenant_a,
            actor_label="system",
            source="system",
            action="update",
            object_type="agent",
            object_id=str(number),
            object_label=f"agent {number}",
        )
        for number in range(60)
    )

    first = signed_in(cast.alice).get("/audit/?object_type=agent").content.decode()
    second = signed_in(cast.alice).get("/audit/?object_type=agent&page=2").content.decode()

    assert first.count('id="entry-') == 50 and "Page 1 of 2" in first
    assert 'href="?object_type=agent&amp;page=2"' in first
    assert second.count('id="entry-') == 10


def test_the_admin_shows_entries_read_only_and_per_tenant(cast: Cast, logged: dict[str, AuditEntry]) -> None:
    alice = signed_in(cast.alice)
    entry = logged["old"]

    listing = alice.get("/admin/audit/auditentry/").content.decode()
    change = alice.get(f"/admin/audit/auditentry/{entry.pk}/change/")
    edit = alice.post(f"/admin/audit/auditentry/{entry.pk}/change/", {"object_label": "forged"})
    delete = alice.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"})
    add = alice.get("/admin/audit/auditentry/add/")
    carols_view = signed_in(cast.carol).get(f"/admin/audit/auditentry/{entry.pk}/change/")
    bobs_view = signed_in(cast.bob).get("/admin/audit/auditentry/")

    assert "Helper" in listing and "Carol&#x27;s agent" not in listing
    assert change.status_code == 200 and b'name="_save"' not in change.content
    assert (edit.status_code, delete.status_code, add.status_code) == (403, 403, 403)
    assert carols_view.status_code == 302
    assert bobs_view.status_code == 403
    assert AuditEntry.objects.get(pk=entry.pk).object_label == "Helper"


# --- Retention ------------------------------------------------------------------------------


def test_retention_removes_only_entries_older_than_the_window(
    cast: Cast, settings: Any, logged: dict[str, AuditEntry]
) -> None:
    settings.AUDIT_RETENTION_DAYS = 7
    AuditEntry.objects.filter(pk=logged["other"].pk).update(created_at=timezone.now() - timedelta(days=6))

    removed = prune_audit_entries()

    assert removed == 1
    assert not AuditEntry.objects.filter(pk=logged["old"].pk).exists()
    assert AuditEntry.objects.filter(pk__in=[logged["recent"].pk, logged["other"].pk]).count() == 2


def test_a_retention_of_zero_keeps_everything(settings: Any, logged: dict[str, AuditEntry]) -> None:
    settings.AUDIT_RETENTION_DAYS = 0
    count = AuditEntry.objects.count()

    assert prune_audit_entries() == 0
    assert AuditEntry.objects.count() == count


def test_retention_runs_on_a_schedule(db: None) -> None:
    ensure_schedules()

    schedule = Schedule.objects.get(name="agentry.prune_audit_entries")
    assert (schedule.func, schedule.schedule_type, schedule.minutes) == (
        "audit.retention.prune_audit_entries",
        Schedule.MINUTES,
        60,
    )


def test_provider_keys_added_in_the_admin_are_recorded_without_the_key(cast: Cast) -> None:
    new = NewEntries()

    signed_in(cast.alice).post(
        "/admin/tenants/providerkey/add/",
        {"tenant": str(cast.tenant_a.pk), "provider": "openai", "new_api_key": "sk-admin-added-key"},
    )

    [entry] = new()
    assert (entry.object_type, entry.action, entry.source, entry.actor) == (
        "provider_key",
        "create",
        "admin",
        cast.alice,
    )
    assert entry.changes == {
        "provider": [None, "openai"],
        "api_key": [None, "[redacted]"],
        "base_url": [None, ""],
    }
