from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.db import connection
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from mcp_servers.models import McpServer
from sessions.models import Run, RunEvent, RunStatus, Session, Step, ToolApproval
from tenants.actors import ACTIVE_TENANT_SESSION_KEY
from tenants.models import ApiKey, Membership, ProviderKey, Role
from tenants.services import api_key_create, membership_set
from tests.conftest import Cast
from tests.factories import field_values, make_agent, make_tenant
from tools.models import Tool, ToolKind

pytestmark = pytest.mark.django_db


def signed_in(email: str, password: str) -> Client:
    client = Client()
    assert client.login(username=email, password=password)
    return client


def test_admin_shows_only_the_users_tenants(cast: Cast) -> None:
    make_agent(tenant=cast.tenant_a, name="Alpha agent")
    make_agent(tenant=cast.tenant_b, name="Beta agent")

    page = signed_in("alice@a.test", "alice-password").get("/admin/agents/agent/")

    assert page.status_code == 200
    assert b"Alpha agent" in page.content
    assert b"Beta agent" not in page.content


def test_admin_object_of_another_tenant_is_not_reachable(cast: Cast) -> None:
    other = make_agent(tenant=cast.tenant_b, name="Beta agent")
    client = signed_in("alice@a.test", "alice-password")

    page = client.get(f"/admin/agents/agent/{other.pk}/change/")
    post = client.post(f"/admin/agents/agent/{other.pk}/delete/", {"post": "yes"})

    assert page.status_code == 302  # the admin redirects a missing object to its index
    assert post.status_code == 302
    assert other.__class__.objects.filter(pk=other.pk).exists()


def test_viewer_may_look_but_not_change(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Alpha agent")
    client = signed_in("victor@a.test", "victor-password")

    view = client.get(f"/admin/agents/agent/{agent.pk}/change/")
    delete = client.post(f"/admin/agents/agent/{agent.pk}/delete/", {"post": "yes"})

    assert view.status_code == 200
    assert b'name="_save"' not in view.content
    assert delete.status_code == 403
    assert agent.__class__.objects.filter(pk=agent.pk).exists()


def test_api_key_admin_never_shows_the_secret_and_can_revoke(cast: Cast) -> None:
    created = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="ci key")
    client = signed_in("alice@a.test", "alice-password")

    page = client.get(f"/admin/tenants/apikey/{created.api_key.pk}/change/")
    client.post(
        "/admin/tenants/apikey/", {"action": "revoke_keys", "_selected_action": [str(created.api_key.pk)]}
    )

    assert page.status_code == 200
    assert created.api_key.secret_hash.encode() not in page.content
    assert created.plaintext.encode() not in page.content
    assert ApiKey.objects.get(pk=created.api_key.pk).revoked_at is not None


def make_conversation(agent: Agent, user: Any) -> Run:
    session = Session.objects.create(tenant=agent.tenant, agent=agent, created_by=user, title="Sums")
    run = Run.objects.create(
        tenant=agent.tenant, session=session, agent=agent, created_by=user, status=RunStatus.COMPLETED
    )
    Step.objects.create(run=run, tenant_id=run.tenant_id, index=0, kind="model_call", status="completed")
    RunEvent.objects.create(session=session, run=run, seq=1, type="run.completed", data={})
    return run


def admin_url(obj: Model, view: str = "change") -> str:
    return reverse(f"admin:{obj._meta.app_label}_{obj._meta.model_name}_{view}", args=[obj.pk])


def test_runs_sessions_steps_and_events_are_view_only(cast: Cast) -> None:
    run = make_conversation(make_agent(tenant=cast.tenant_a, name="Alpha agent"), cast.alice)
    rows = [run.session, run, run.steps.get(), run.events.get()]
    before = [field_values(type(row)._default_manager.get(pk=row.pk)) for row in rows]
    client = signed_in("alice@a.test", "alice-password")

    views = [client.get(admin_url(row)) for row in rows]
    changes = [client.post(admin_url(row), {"status": "failed", "title": "changed"}) for row in rows]
    deletes = [client.post(admin_url(row, "delete"), {"post": "yes"}) for row in rows]

    assert [view.status_code for view in views] == [200, 200, 200, 200]
    assert [b'name="_save"' in view.content for view in views] == [False, False, False, False]
    assert [change.status_code for change in changes] == [403, 403, 403, 403]
    assert [delete.status_code for delete in deletes] == [403, 403, 403, 403]
    assert [field_values(type(row)._default_manager.get(pk=row.pk)) for row in rows] == before


def test_deleting_an_agent_removes_its_view_only_history(cast: Cast) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Alpha agent")
    run = make_conversation(agent, cast.alice)
    client = signed_in("alice@a.test", "alice-password")

    confirm = client.get(admin_url(agent, "delete"))
    delete = client.post(admin_url(agent, "delete"), {"post": "yes"})

    assert confirm.status_code == 200
    assert b"permission to delete" not in confirm.content
    assert delete.status_code == 302
    assert not Agent.objects.filter(pk=agent.pk).exists()
    assert not Session.objects.filter(pk=run.session_id).exists()


def test_own_tool_can_be_switched_off_and_built_ins_are_read_only(cast: Cast) -> None:
    tool = Tool.objects.create(
        tenant=cast.tenant_a,
        name="lookup",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template="https://api.example/items",
        secret_headers={"Authorization": "Bearer tool-header-secret"},
    )
    builtin = Tool.objects.create(name="admin_test_clock", kind=ToolKind.BUILTIN)
    client = signed_in("alice@a.test", "alice-password")
    form = {"description": "Finds items", "timeout_seconds": "30", "requires_approval": "on"}

    page = client.get(admin_url(tool))
    too_slow = client.post(admin_url(tool), {**form, "timeout_seconds": "301"})
    switched_off = client.post(admin_url(tool), form)
    builtin_page = client.get(admin_url(builtin))
    builtin_change = client.post(admin_url(builtin), form)

    assert page.status_code == 200
    assert b"Authorization" in page.content
    assert b"tool-header-secret" not in page.content
    assert too_slow.status_code == 200
    assert b"Must be between 1 and 300." in too_slow.content
    assert switched_off.status_code == 302
    saved = Tool.objects.get(pk=tool.pk)
    assert (saved.is_enabled, saved.requires_approval, saved.description) == (False, True, "Finds items")
    assert (saved.url_template, saved.secret_headers) == (
        "https://api.example/items",
        {"Authorization": "Bearer tool-header-secret"},
    )
    assert builtin_page.status_code == 200
    assert b'name="_save"' not in builtin_page.content
    assert builtin_change.status_code == 403
    assert Tool.objects.get(pk=builtin.pk).is_enabled is True


def test_provider_key_is_write_only_and_masked(cast: Cast) -> None:
    client = signed_in("alice@a.test", "alice-password")
    secret = "sk-ant-admin-test-key-0123456789"

    add = client.post(
        reverse("admin:tenants_providerkey_add"),
        {"tenant": str(cast.tenant_a.pk), "provider": "anthropic", "new_api_key": secret},
    )
    provider_key = ProviderKey.objects.get(tenant=cast.tenant_a)
    change_page = client.get(admin_url(provider_key))
    listing = client.get(reverse("admin:tenants_providerkey_changelist"))
    kept = client.post(
        admin_url(provider_key), {"tenant": str(cast.tenant_a.pk), "provider": "anthropic", "new_api_key": ""}
    )
    kept_key = ProviderKey.objects.get(pk=provider_key.pk).api_key
    replaced = client.post(
        admin_url(provider_key),
        {
            "tenant": str(cast.tenant_a.pk),
            "provider": "anthropic",
            "new_api_key": "sk-ant-replacement-9876543210",
        },
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT api_key FROM tenants_providerkey WHERE id = %s", [provider_key.pk.hex])
        stored_rows = cursor.fetchall()

    assert add.status_code == 302
    assert kept_key == secret
    assert (kept.status_code, replaced.status_code) == (302, 302)
    assert ProviderKey.objects.get(pk=provider_key.pk).api_key == "sk-ant-replacement-9876543210"
    for page in (change_page, listing):
        assert page.status_code == 200
        assert b"set (encrypted, never shown)" in page.content
        assert secret.encode() not in page.content
        assert b"sk-ant-replacement" not in page.content
    assert b'<input type="password" name="new_api_key"' in change_page.content
    assert stored_rows != [] and b"sk-ant" not in str(stored_rows).encode()


def test_provider_key_needs_a_key_to_be_added(cast: Cast) -> None:
    client = signed_in("alice@a.test", "alice-password")

    answer = client.post(
        reverse("admin:tenants_providerkey_add"),
        {"tenant": str(cast.tenant_a.pk), "provider": "openai", "new_api_key": "  "},
    )

    assert answer.status_code == 200
    assert b"Enter the provider&#x27;s API key." in answer.content
    assert not ProviderKey.objects.exists()


def test_admins_see_the_tenants_users_without_credentials(cast: Cast) -> None:
    client = signed_in("alice@a.test", "alice-password")

    listing = client.get(reverse("admin:auth_user_changelist"))
    bob_page = client.get(admin_url(cast.bob))
    bob_password = client.get(reverse("admin:auth_user_password_change", args=[cast.bob.pk]))
    carol_page = client.get(admin_url(cast.carol))

    assert listing.status_code == 200
    assert b"bob@a.test" in listing.content
    assert b"carol@b.test" not in listing.content
    assert bob_page.status_code == 200
    assert cast.bob.password.encode() not in bob_page.content
    assert b"md5$" not in bob_page.content
    assert b'name="_save"' not in bob_page.content
    assert bob_password.status_code == 403
    assert carol_page.status_code == 302


@pytest.mark.parametrize(
    "url",
    [
        "/admin/auth/user/",
        "/admin/tenants/membership/",
        "/admin/tenants/apikey/",
        "/admin/tenants/providerkey/",
    ],
)
def test_members_and_keys_are_for_admins_as_in_the_app(cast: Cast, url: str) -> None:
    assert signed_in("victor@a.test", "victor-password").get(url).status_code == 403
    assert signed_in("bob@a.test", "bob-password").get(url).status_code == 403


def test_memberships_are_managed_in_the_app_not_the_admin(cast: Cast) -> None:
    membership = Membership.objects.get(tenant=cast.tenant_a, user=cast.bob)
    client = signed_in("alice@a.test", "alice-password")

    view = client.get(admin_url(membership))
    change = client.post(
        admin_url(membership), {"tenant": str(cast.tenant_a.pk), "user": cast.bob.pk, "role": "owner"}
    )
    delete = client.post(admin_url(membership, "delete"), {"post": "yes"})

    assert view.status_code == 200
    assert (change.status_code, delete.status_code) == (403, 403)
    assert Membership.objects.get(pk=membership.pk).role == Role.MEMBER


def test_admin_works_in_the_active_tenant_only(cast: Cast) -> None:
    tenant_c = make_tenant("tenant-c")
    membership_set(tenant=tenant_c, user=cast.alice, role=Role.VIEWER)
    make_agent(tenant=cast.tenant_a, name="Alpha agent")
    make_agent(tenant=tenant_c, name="Charlie agent")
    client = signed_in("alice@a.test", "alice-password")

    in_a = client.get("/admin/agents/agent/")
    session = client.session
    session[ACTIVE_TENANT_SESSION_KEY] = str(tenant_c.pk)
    session.save()
    in_c = client.get("/admin/agents/agent/")
    add_in_c = client.get("/admin/agents/agent/add/")

    assert (b"Alpha agent" in in_a.content, b"Charlie agent" in in_a.content) == (True, False)
    assert f"Agentry administration · {cast.tenant_a.name}".encode() in in_a.content
    assert (b"Alpha agent" in in_c.content, b"Charlie agent" in in_c.content) == (False, True)
    assert f"Agentry administration · {tenant_c.name}".encode() in in_c.content
    assert add_in_c.status_code == 403  # a viewer in tenant C


def test_admin_labels_read_well() -> None:
    labels = {
        model._meta.label: (
            apps.get_app_config(model._meta.app_label).verbose_name,
            model._meta.verbose_name_plural,
        )
        for model in admin.site._registry
        if model._meta.app_label not in ("auth", "django_q")
    }

    assert labels == {
        "tenants.Tenant": ("Tenants", "tenants"),
        "tenants.Membership": ("Tenants", "memberships"),
        "tenants.ApiKey": ("Tenants", "API keys"),
        "tenants.ProviderKey": ("Tenants", "provider keys"),
        "agents.Agent": ("Agents", "agents"),
        "agent_sessions.Session": ("Agent sessions", "sessions"),
        "agent_sessions.Run": ("Agent sessions", "runs"),
        "agent_sessions.Step": ("Agent sessions", "steps"),
        "agent_sessions.RunEvent": ("Agent sessions", "run events"),
        "agent_sessions.ToolApproval": ("Agent sessions", "tool approvals"),
        "agent_sessions.UserQuestion": ("Agent sessions", "user questions"),
        "memory.Memory": ("Memory", "memories"),
        "tools.Tool": ("Tools", "tools"),
        "mcp_servers.McpServer": ("MCP servers", "MCP servers"),
        "billing.ModelPrice": ("Billing", "model prices"),
        "billing.CreditAccount": ("Billing", "credit accounts"),
        "billing.LedgerEntry": ("Billing", "ledger entries"),
        "billing.Budget": ("Billing", "budgets"),
        "audit.AuditEntry": ("Audit log", "audit entries"),
        "files.StoredFile": ("Files and knowledge", "stored files"),
        "files.KnowledgeBase": ("Files and knowledge", "knowledge bases"),
    }


def test_owner_renames_the_tenant_but_limits_stay_with_the_app(cast: Cast) -> None:
    client = signed_in("alice@a.test", "alice-password")

    answer = client.post(
        admin_url(cast.tenant_a),
        {"name": "Renamed", "slug": "taken-slug", "settings": '{"max_runs_per_minute": 999999999}'},
    )

    cast.tenant_a.refresh_from_db()
    assert answer.status_code == 302
    assert (cast.tenant_a.name, cast.tenant_a.slug, cast.tenant_a.settings) == ("Renamed", "tenant-a", {})


AGENT_FORM = {
    "name": "Checked",
    "model_provider": "offline",
    "temperature": "0.5",
    "max_steps": "5",
    "max_tokens": "100",
    "approval_required_tools": "[]",
    "planning_mode": "auto",
}


def test_agent_form_in_the_admin_follows_the_apps_rules(cast: Cast) -> None:
    client = signed_in("alice@a.test", "alice-password")

    too_many_steps = client.post(
        "/admin/agents/agent/add/", {**AGENT_FORM, "tenant": str(cast.tenant_a.pk), "max_steps": "1000"}
    )
    cast.tenant_a.settings = {"max_agents": 1}
    cast.tenant_a.save()
    first = client.post("/admin/agents/agent/add/", {**AGENT_FORM, "tenant": str(cast.tenant_a.pk)})
    over_limit = client.post(
        "/admin/agents/agent/add/", {**AGENT_FORM, "tenant": str(cast.tenant_a.pk), "name": "Second"}
    )

    assert too_many_steps.status_code == 200
    assert b"Must be between 1 and 100." in too_many_steps.content
    assert first.status_code == 302
    assert over_limit.status_code == 200
    assert b"This tenant has reached its agent limit." in over_limit.content
    assert list(Agent.objects.filter(tenant=cast.tenant_a).values_list("name", flat=True)) == ["Checked"]


def test_mcp_server_timeouts_in_the_admin_stay_within_the_apps_ranges(cast: Cast) -> None:
    server = McpServer.objects.create(
        tenant=cast.tenant_a, name="files", transport="streamable_http", url="https://files.example/mcp"
    )
    client = signed_in("alice@a.test", "alice-password")

    too_long = client.post(
        admin_url(server),
        {"is_enabled": "on", "connect_timeout_seconds": "10", "call_timeout_seconds": "99999"},
    )
    switched_off = client.post(
        admin_url(server), {"connect_timeout_seconds": "5", "call_timeout_seconds": "30"}
    )

    assert too_long.status_code == 200
    assert b"Must be between 1 and 3600 seconds." in too_long.content
    assert switched_off.status_code == 302
    server.refresh_from_db()
    assert (server.is_enabled, server.connect_timeout_seconds, server.call_timeout_seconds) == (
        False,
        5.0,
        30.0,
    )


def test_an_approval_shows_its_calls_arguments_with_secrets_masked_and_cannot_be_decided_here(
    cast: Cast,
) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)
    run = Run.objects.create(
        tenant=cast.tenant_a,
        session=session,
        agent=agent,
        created_by=cast.alice,
        status=RunStatus.AWAITING_APPROVAL,
    )
    approval = ToolApproval.objects.create(
        tenant=cast.tenant_a,
        run=run,
        tool_call_id="call-1",
        tool_name="http_fetch",
        arguments={"url": "https://example.com/report", "api_key": "sk-approval-secret-0123"},
        edited_arguments={"url": "https://example.com/summary", "password": "hunter2-approval"},
        expires_at=timezone.now(),
    )
    client = signed_in("alice@a.test", "alice-password")

    page = client.get(admin_url(approval))
    listing = client.get(reverse("admin:agent_sessions_toolapproval_changelist"))
    decided = client.post(admin_url(approval), {"status": "approved", "decision": "approve"})

    text = page.content.decode()
    assert (page.status_code, listing.status_code, decided.status_code) == (200, 200, 403)
    assert "https://example.com/report" in text and "https://example.com/summary" in text
    assert "sk-approval-secret-0123" not in text and "hunter2-approval" not in text
    assert "http_fetch" in listing.content.decode()
    assert ToolApproval.objects.get(pk=approval.pk).status == "pending"
