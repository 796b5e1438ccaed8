"""Every page renders for the roles that may see it, refuses the others, and hides other tenants."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.test import Client

from agents.models import Agent
from memory.models import Memory, MemoryStatus
from sessions.models import Message, Run, RunStatus, Session
from tenants.actors import ACTIVE_TENANT_SESSION_KEY
from tenants.models import ApiKey, Membership, Role
from tenants.services import api_key_create
from tests.factories import make_agent, make_user
from tests.web.conftest import World
from tools.models import AgentTool, Tool, ToolKind

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]
OFFLINE_LABEL = "offline-demo (local demo model, not an LLM)"


def pages_of(world: World) -> dict[str, str]:
    return {
        "dashboard": "/",
        "agents": "/agents/",
        "agent": f"/agents/{world.agent_a.pk}/",
        "agent tools": f"/agents/{world.agent_a.pk}/tools/",
        "chat": "/chat/",
        "session": f"/chat/{world.session_a.pk}/",
        "run": f"/runs/{world.run_a.pk}/",
        "tools": "/tools/",
        "mcp": "/mcp/",
        "memories": "/memories/",
        "agent new": "/agents/new/",
        "agent edit": f"/agents/{world.agent_a.pk}/edit/",
        "agent delete": f"/agents/{world.agent_a.pk}/delete/",
        "tool new": "/tools/new/",
        "mcp new": "/mcp/new/",
        "memory new": "/memories/new/",
        "settings": "/settings/",
        "audit": "/audit/",
    }


READ_PAGES = [
    "dashboard",
    "agents",
    "agent",
    "agent tools",
    "chat",
    "session",
    "run",
    "tools",
    "mcp",
    "memories",
]
ADMIN_PAGES = [
    "agent new",
    "agent edit",
    "agent delete",
    "tool new",
    "mcp new",
    "memory new",
    "settings",
    "audit",
]


def user_of(world: World, role: str) -> Any:
    return {
        "viewer": world.cast.victor,
        "member": world.cast.bob,
        "admin": world.dave,
        "owner": world.cast.alice,
    }[role]


@pytest.mark.parametrize("role", ["viewer", "member", "admin", "owner"])
def test_read_pages_render_for_every_role(world: World, client_for: ClientFor, role: str) -> None:
    client = client_for(user_of(world, role))
    pages = pages_of(world)

    statuses = {name: client.get(pages[name]).status_code for name in READ_PAGES}

    assert statuses == dict.fromkeys(READ_PAGES, 200)


@pytest.mark.parametrize(
    ("role", "expected"), [("viewer", 403), ("member", 403), ("admin", 200), ("owner", 200)]
)
def test_admin_pages_render_for_admins_and_refuse_the_others(
    world: World, client_for: ClientFor, role: str, expected: int
) -> None:
    client = client_for(user_of(world, role))
    pages = pages_of(world)

    statuses = {name: client.get(pages[name]).status_code for name in ADMIN_PAGES}

    assert statuses == dict.fromkeys(ADMIN_PAGES, expected)


def test_a_refusal_renders_the_403_page_with_the_reason(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.bob).get("/agents/new/")

    assert response.status_code == 403
    assert "You cannot do that here" in response.content.decode()
    assert "This page needs the admin role or higher." in response.content.decode()


@pytest.mark.parametrize(
    "path", ["/", "/agents/", "/chat/", "/settings/", "/runs/00000000-0000-0000-0000-000000000000/"]
)
def test_anonymous_visitors_are_sent_to_sign_in(db: None, path: str) -> None:
    response = Client().get(path)

    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={path}"


def test_sign_in_with_the_email_in_any_case_then_sign_out(world: World) -> None:
    client = Client()

    signed_in = client.post("/login/", {"username": " Alice@A.test ", "password": "alice-password"})
    dashboard = client.get("/")
    signed_out = client.post("/logout/")

    assert (signed_in.status_code, signed_in["Location"]) == (302, "/")
    assert dashboard.status_code == 200
    assert world.cast.tenant_a.name in dashboard.content.decode()
    assert (signed_out.status_code, signed_out["Location"]) == (302, "/login/")
    assert client.get("/").status_code == 302


def test_sign_in_with_a_wrong_password_says_so_and_signs_nobody_in(world: World) -> None:
    client = Client()

    response = client.post("/login/", {"username": "alice@a.test", "password": "wrong"})

    assert response.status_code == 200
    assert "That email and password do not match an account." in response.content.decode()
    assert "_auth_user_id" not in client.session


def test_sign_in_goes_back_to_the_page_asked_for(world: World) -> None:
    response = Client().post(
        "/login/", {"username": "bob@a.test", "password": "bob-password", "next": "/agents/"}
    )

    assert response["Location"] == "/agents/"


def test_a_user_without_a_tenant_sees_why(db: None, client_for: ClientFor) -> None:
    loner = make_user("loner@nowhere.test", password="loner-password")

    response = client_for(loner).get("/")

    assert response.status_code == 403
    assert "You are not in any tenant yet" in response.content.decode()


def test_the_active_tenant_is_always_shown(world: World, client_for: ClientFor) -> None:
    body = client_for(world.cast.bob).get("/agents/").content.decode()

    assert f"Active tenant: </span>{world.cast.tenant_a.name}" in body


def test_the_tenant_switcher_changes_the_active_tenant(world: World, client_for: ClientFor) -> None:
    Membership.objects.create(tenant=world.cast.tenant_b, user=world.cast.bob, role=Role.VIEWER)
    client = client_for(world.cast.bob)

    before = client.get("/agents/").content.decode()
    switched = client.post("/tenant/", {"tenant": str(world.cast.tenant_b.pk)})
    after = client.get("/agents/").content.decode()

    assert 'id="tenant-select"' in before
    assert "Helper" in before and "Carol&#x27;s agent" not in before
    assert (switched.status_code, switched["Location"]) == (302, "/")
    assert client.session[ACTIVE_TENANT_SESSION_KEY] == str(world.cast.tenant_b.pk)
    assert "Carol&#x27;s agent" in after and "Helper" not in after


def test_switching_to_a_tenant_one_is_not_in_is_404_and_changes_nothing(
    world: World, client_for: ClientFor
) -> None:
    client = client_for(world.cast.bob)

    response = client.post("/tenant/", {"tenant": str(world.cast.tenant_b.pk)})

    assert response.status_code == 404
    assert ACTIVE_TENANT_SESSION_KEY not in client.session
    assert "Helper" in client.get("/agents/").content.decode()


def cross_tenant_reads(world: World) -> list[str]:
    server_tool = Tool.objects.create(
        tenant=world.cast.tenant_a,
        name="lookup",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template="https://example.com/{q}",
    )
    memory = Memory.objects.create(tenant=world.cast.tenant_a, agent=world.agent_a, content="Bob likes tea")
    message = Message.objects.filter(session=world.session_a, role="user").get()
    return [
        f"/agents/{world.agent_a.pk}/",
        f"/agents/{world.agent_a.pk}/edit/",
        f"/agents/{world.agent_a.pk}/tools/",
        f"/agents/{world.agent_a.pk}/delete/",
        f"/chat/{world.session_a.pk}/",
        f"/chat/{world.session_a.pk}/messages/{message.pk}/",
        f"/runs/{world.run_a.pk}/",
        f"/tools/{server_tool.pk}/edit/",
        f"/memories/{memory.pk}/edit/",
        "/agents/not-a-uuid/",
    ]


def test_another_tenants_objects_are_404_pages(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.carol)

    responses = [client.get(path) for path in cross_tenant_reads(world)]

    assert [response.status_code for response in responses] == [404] * len(responses)
    assert all("We could not find that" in response.content.decode() for response in responses)


def snapshot(world: World) -> dict[str, Any]:
    return {
        "agents": list(Agent.objects.order_by("name").values_list("name", "is_active")),
        "sessions": Session.objects.count(),
        "messages": Message.objects.count(),
        "runs": list(Run.objects.order_by("created_at").values_list("status", flat=True)),
        "memories": list(Memory.objects.values_list("status", flat=True)),
        "keys": list(ApiKey.objects.values_list("revoked_at", flat=True)),
        "memberships": list(Membership.objects.order_by("id").values_list("role", flat=True)),
    }


def test_another_tenants_objects_cannot_be_changed(world: World, client_for: ClientFor) -> None:
    memory = Memory.objects.create(
        tenant=world.cast.tenant_a, agent=world.agent_a, content="Suggested", status=MemoryStatus.SUGGESTED
    )
    key = api_key_create(tenant=world.cast.tenant_a, created_by=world.cast.alice, name="ci").api_key
    queued = Run.objects.create(
        tenant=world.cast.tenant_a, session=world.session_a, agent=world.agent_a, status=RunStatus.QUEUED
    )
    membership = Membership.objects.get(user=world.cast.bob)
    before = snapshot(world)
    client = client_for(world.cast.carol)
    writes = [
        (f"/agents/{world.agent_a.pk}/delete/", {}),
        (f"/agents/{world.agent_a.pk}/edit/", {"name": "Stolen"}),
        (f"/chat/{world.session_a.pk}/send/", {"content": "hi"}),
        (f"/chat/{world.session_a.pk}/delete/", {}),
        ("/chat/new/", {"agent": str(world.agent_a.pk)}),
        (f"/runs/{queued.pk}/cancel/", {}),
        (f"/runs/{world.run_a.pk}/retry/", {}),
        (f"/memories/{memory.pk}/approve/", {}),
        (f"/memories/{memory.pk}/delete/", {}),
        (f"/settings/api-keys/{key.pk}/revoke/", {}),
        (f"/settings/members/{membership.pk}/role/", {"role": "owner"}),
        (f"/settings/members/{membership.pk}/remove/", {}),
    ]

    statuses = [client.post(path, data).status_code for path, data in writes]

    assert statuses == [404] * len(writes)
    assert snapshot(world) == before


def test_unknown_urls_answer_the_404_page(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.bob).get("/no-such-page/")

    assert response.status_code == 404
    assert "We could not find that" in response.content.decode()


def test_the_500_page_stands_alone() -> None:
    html = render_to_string("500.html")

    assert "Something went wrong on our side" in html
    assert '<link rel="stylesheet" href="/static/css/app.css">' in html


def csrf_token_of(html: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match is not None
    return match.group(1)


def test_forms_need_the_csrf_token(world: World) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.cast.alice)
    fields = {
        "name": "Guarded",
        "model_provider": "offline",
        "temperature": "0.5",
        "max_steps": "5",
        "max_tokens": "1000",
        "tool_profile": "minimal",
        "planning_mode": "direct",
        "is_active": "on",
    }

    refused = client.post("/agents/new/", fields)
    token = csrf_token_of(client.get("/agents/new/").content.decode())
    accepted = client.post("/agents/new/", {**fields, "csrfmiddlewaretoken": token})

    assert refused.status_code == 403
    assert "This form expired" in refused.content.decode()
    assert accepted.status_code == 302
    assert list(Agent.objects.filter(name="Guarded").values_list("max_steps", flat=True)) == [5]


def test_viewers_see_pages_without_controls(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.victor)

    agents = client.get("/agents/").content.decode()
    agent = client.get(f"/agents/{world.agent_a.pk}/").content.decode()
    chat = client.get(f"/chat/{world.session_a.pk}/").content.decode()
    new_chat = client.get("/chat/").content.decode()
    dashboard = client.get("/").content.decode()

    assert "New agent" not in agents and "/edit/" not in agents and 'href="/chat/?agent=' not in agents
    assert "Delete" not in agent and "New chat" not in agent and "/edit/" not in agent
    assert "composer-input" not in chat and "Viewers can read conversations but not post in them." in chat
    assert "Start chat" not in new_chat
    assert "/settings/" not in dashboard


def test_members_chat_but_see_no_admin_controls(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.bob)

    agents = client.get("/agents/").content.decode()
    chat = client.get(f"/chat/{world.session_a.pk}/").content.decode()
    tools = client.get(f"/agents/{world.agent_a.pk}/tools/").content.decode()

    assert "New agent" not in agents and f'href="/chat/?agent={world.agent_a.pk}"' in agents
    assert 'id="composer-input"' in chat
    assert "Save policy" not in tools and "Profile" in tools


def test_a_member_reads_but_cannot_post_in_someone_elses_conversation(
    world: World, client_for: ClientFor
) -> None:
    alice_session = Session.objects.create(
        tenant=world.cast.tenant_a, agent=world.agent_a, created_by=world.cast.alice, title="Alice's"
    )
    client = client_for(world.cast.bob)

    page = client.get(f"/chat/{alice_session.pk}/").content.decode()
    posted = client.post(f"/chat/{alice_session.pk}/send/", {"content": "hello"})

    assert "This is someone else's conversation" in page and "composer-input" not in page
    assert posted.status_code == 403
    assert not Message.objects.filter(session=alice_session).exists()


def test_the_offline_model_is_labelled_wherever_a_model_is_shown(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.alice)
    pages = [
        "/agents/",
        f"/agents/{world.agent_a.pk}/",
        f"/chat/{world.session_a.pk}/",
        "/chat/",
        f"/runs/{world.run_a.pk}/",
    ]
    world.run_a.agent_config = {"model_provider": "offline", "model_name": "offline-demo"}
    world.run_a.save(update_fields=["agent_config"])

    shown = {page: OFFLINE_LABEL in client.get(page).content.decode() for page in pages}

    assert shown == dict.fromkeys(pages, True)


def test_dashboard_shows_recent_work_usage_and_servers_that_are_down(
    world: World, client_for: ClientFor
) -> None:
    from mcp_servers.models import McpServer

    files = McpServer.objects.create(
        tenant=world.cast.tenant_a,
        name="files",
        transport="streamable_http",
        url="https://files.example",
        health_status="down",
        last_error="connection refused",
    )
    # The banner names only servers an agent uses (tests/web/test_dashboard_console.py).
    lister = Tool.objects.create(
        tenant=world.cast.tenant_a, name="files__list", kind=ToolKind.MCP, mcp_server=files
    )
    AgentTool.objects.create(agent=world.agent_a, tool=lister)
    McpServer.objects.create(
        tenant=world.cast.tenant_b,
        name="b-down",
        transport="streamable_http",
        url="https://b.example",
        health_status="down",
    )

    body = client_for(world.cast.bob).get("/").content.decode()

    assert "Bob&#x27;s sums" in body and "Carol&#x27;s chat" not in body
    assert '<p class="stat-value">1</p><p class="stat-note">1 completed · 0 failed</p>' in body
    assert 'title="150 tokens">150</p>' in body
    assert "1 MCP server down:" in body and "files" in body and "b-down" not in body


def test_agents_list_searches_and_filters(world: World, client_for: ClientFor) -> None:
    make_agent(tenant=world.cast.tenant_a, name="Writer", description="Drafts letters", is_active=False)
    make_agent(tenant=world.cast.tenant_a, name="Cloud", model_provider="anthropic")
    client = client_for(world.cast.bob)

    def names(query: str, **headers: str) -> list[str]:
        body = client.get(f"/agents/?{query}", **headers).content.decode()
        return re.findall(r'class="agent-name"><a href="[^"]+">([^<]+)</a>', body)

    assert names("") == ["Cloud", "Helper", "Writer"]
    assert names("q=letters") == ["Writer"]
    assert names("status=inactive") == ["Writer"]
    assert names("provider=anthropic") == ["Cloud"]
    assert names("q=sums", HTTP_HX_REQUEST="true") == ["Helper"]
    assert "<html" not in client.get("/agents/?q=x", HTTP_HX_REQUEST="true").content.decode()
