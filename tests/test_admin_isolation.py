"""The admin as tenant A's owner sees nothing of tenant B on any page; a superuser sees all.

Tenant B's rows all carry the marker "Bravo"; with B's name, slug, ids and carol's e-mail,
none of it may appear on any changelist, filter, add, change, popup or autocomplete answer.
"""

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.core.files.base import ContentFile
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from agents.models import Agent
from billing.models import Budget, CreditAccount, LedgerEntry
from billing.services import credits_grant
from core.admin import TenantScopedAdmin
from files.models import KnowledgeBase, StoredFile
from mcp_servers.models import McpServer
from memory.models import Memory
from sessions.models import Run, RunEvent, RunStatus, Session, Step, ToolApproval, UserQuestion
from tenants.models import ApiKey, Membership, ProviderKey, Tenant
from tenants.services import api_key_create
from tests.conftest import Cast
from tests.factories import field_values, make_agent
from tools.models import Tool, ToolKind

pytestmark = pytest.mark.django_db

User = get_user_model()

# What a tenant owner may add, change and delete here; the admin refuses the others with 403
# before it looks for the row.
ADDABLE_BY_TENANT_OWNERS = {Agent, ProviderKey, CreditAccount, Budget}
CHANGEABLE_BY_TENANT_OWNERS = {
    Tenant,
    Agent,
    Memory,
    Tool,
    McpServer,
    ApiKey,
    ProviderKey,
    CreditAccount,
    Budget,
}
DELETABLE_BY_TENANT_OWNERS = {
    Agent,
    Memory,
    McpServer,
    ApiKey,
    ProviderKey,
    Budget,
    StoredFile,
    KnowledgeBase,
}


@dataclass
class Rows:
    by_model: dict[type[Model], Model]
    markers: list[str]


@dataclass
class AdminWorld:
    cast: Cast
    a: Rows
    b: Rows


def rows_of_every_kind(tenant: Tenant, owner: Any, prefix: str) -> Rows:
    """One row of every model the admin shows, in ``tenant``, each naming ``prefix``."""
    agent = make_agent(tenant=tenant, name=f"{prefix} agent", created_by=owner)
    session = Session.objects.create(tenant=tenant, agent=agent, created_by=owner, title=f"{prefix} session")
    run = Run.objects.create(
        tenant=tenant,
        session=session,
        agent=agent,
        created_by=owner,
        title=f"{prefix} run",
        status=RunStatus.COMPLETED,
        stop_reason="end_turn",
    )
    step = Step.objects.create(
        run=run,
        tenant_id=run.tenant_id,
        index=0,
        kind="tool_call",
        status="completed",
        tool_call_id=f"{prefix}-call",
    )
    event = RunEvent.objects.create(
        session=session, run=run, seq=1, type="run.completed", data={"note": f"{prefix} event"}
    )
    approval = ToolApproval.objects.create(
        tenant=tenant,
        run=run,
        tool_call_id=f"{prefix}-approval-call",
        tool_name=f"{prefix.lower()}_lookup",
        arguments={"query": f"{prefix} query", "api_key": f"{prefix}-approval-secret"},
        expires_at=timezone.now(),
    )
    question = UserQuestion.objects.create(
        tenant=tenant,
        run=run,
        tool_call_id=f"{prefix}-question-call",
        question=f"{prefix} question?",
        expires_at=timezone.now(),
    )
    memory = Memory.objects.create(
        tenant=tenant, agent=agent, content=f"{prefix} memory", created_by=owner, subject_user=owner
    )
    tool = Tool.objects.create(
        tenant=tenant,
        name=f"{prefix.lower()}_lookup",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template=f"https://{prefix.lower()}.example/items",
        secret_headers={"Authorization": f"Bearer {prefix}-tool-secret"},
    )
    server = McpServer.objects.create(
        tenant=tenant,
        name=f"{prefix.lower()}_files",
        transport="streamable_http",
        url=f"https://{prefix.lower()}.example/mcp",
        token=f"{prefix}-mcp-token",
    )
    api_key = api_key_create(tenant=tenant, created_by=owner, name=f"{prefix} key").api_key
    provider_key = ProviderKey.objects.create(
        tenant=tenant, provider="anthropic", api_key=f"sk-ant-{prefix}-provider-secret"
    )
    ledger_entry = credits_grant(tenant=tenant, amount_micros=1_000_000, note=f"{prefix} grant")
    budget = Budget.objects.create(tenant=tenant, scope="agent", agent=agent, monthly_limit_micros=5_000_000)
    stored_file = StoredFile.objects.create(
        tenant=tenant,
        purpose="attachment",
        session=session,
        name=f"{prefix} notes.txt",
        content_type="text/plain",
        size=5,
        sha256="0" * 64,
        blob=ContentFile(b"notes", name="notes.txt"),
        status="ready",
    )
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=f"{prefix} knowledge")
    by_model: dict[type[Model], Model] = {
        CreditAccount: CreditAccount.objects.get(tenant=tenant),
        LedgerEntry: ledger_entry,
        Budget: budget,
        Tenant: tenant,
        Membership: Membership.objects.get(tenant=tenant, user=owner),
        User: owner,
        Agent: agent,
        Session: session,
        Run: run,
        Step: step,
        RunEvent: event,
        ToolApproval: approval,
        UserQuestion: question,
        Memory: memory,
        Tool: tool,
        McpServer: server,
        ApiKey: api_key,
        ProviderKey: provider_key,
        StoredFile: stored_file,
        KnowledgeBase: knowledge_base,
    }
    markers = [prefix, tenant.name, tenant.slug, owner.email, api_key.prefix]
    markers += [str(row.pk) for row in by_model.values() if not isinstance(row.pk, int)]
    return Rows(by_model=by_model, markers=markers)


@pytest.fixture
def world(cast: Cast) -> AdminWorld:
    Tenant.objects.filter(pk=cast.tenant_a.pk).update(name="Alpha Works")
    Tenant.objects.filter(pk=cast.tenant_b.pk).update(name="Bravo Holdings")
    cast.tenant_a.refresh_from_db()
    cast.tenant_b.refresh_from_db()
    return AdminWorld(
        cast=cast,
        a=rows_of_every_kind(cast.tenant_a, cast.alice, "Alpha"),
        b=rows_of_every_kind(cast.tenant_b, cast.carol, "Bravo"),
    )


def signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url_of(model: type[Model], view: str, *args: Any) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


def leaked(content: bytes, markers: list[str]) -> list[str]:
    text = content.decode()
    return [marker for marker in markers if marker in text]


def admin_pages(world: AdminWorld) -> list[tuple[str, int]]:
    """Every admin page tenant A's owner can ask for, with the status it answers by design."""
    scoped_apps = {
        model._meta.app_label
        for model, model_admin in admin.site._registry.items()
        if isinstance(model_admin, TenantScopedAdmin)
    }
    pages = [(reverse("admin:index"), 200)]
    for model, model_admin in admin.site._registry.items():
        is_scoped = isinstance(model_admin, TenantScopedAdmin)
        app_label = model._meta.app_label
        pages.append((reverse("admin:app_list", args=[app_label]), 200 if app_label in scoped_apps else 404))
        pages.append((url_of(model, "changelist"), 200 if is_scoped else 403))
        pages.append((url_of(model, "changelist") + "?_popup=1&_to_field=id", 200 if is_scoped else 403))
        # "ravo" matches tenant B's rows; the page echoes the term, which is no marker.
        pages.append((url_of(model, "changelist") + "?q=ravo", 200 if is_scoped else 403))
        pages.append((url_of(model, "add"), 200 if model in ADDABLE_BY_TENANT_OWNERS else 403))
        own = world.a.by_model.get(model)
        if own is not None:
            pages.append((url_of(model, "change", own.pk), 200))
            pages.append((url_of(model, "history", own.pk), 200))
            pages.append(
                (url_of(model, "delete", own.pk), 200 if model in DELETABLE_BY_TENANT_OWNERS else 403)
            )
    return list(dict(pages).items())


def test_tenant_owner_sees_no_other_tenant_on_any_admin_page(world: AdminWorld) -> None:
    client = signed_in(world.cast.alice)

    answers = {url: client.get(url) for url, _ in admin_pages(world)}

    assert {url: answers[url].status_code for url, _ in admin_pages(world)} == dict(admin_pages(world))
    assert {url: leaked(page.content, world.b.markers) for url, page in answers.items()} == {
        url: [] for url in answers
    }
    agent_list = answers[url_of(Agent, "changelist")].content.decode()
    assert "Alpha agent" in agent_list


@pytest.mark.parametrize("member", ["bob", "victor"])
def test_members_and_viewers_see_no_other_tenant_either(world: AdminWorld, member: str) -> None:
    client = signed_in(getattr(world.cast, member))

    answers = {url: client.get(url) for url, _ in admin_pages(world)}

    assert {url: page.status_code in (200, 302, 403, 404) for url, page in answers.items()} == {
        url: True for url in answers
    }
    assert answers[url_of(Agent, "changelist")].status_code == 200
    assert {url: leaked(page.content, world.b.markers) for url, page in answers.items()} == {
        url: [] for url in answers
    }


def test_tenant_owner_sees_no_other_tenant_on_change_pages_of_every_own_row(world: AdminWorld) -> None:
    client = signed_in(world.cast.alice)

    pages = {model: client.get(url_of(model, "change", row.pk)) for model, row in world.a.by_model.items()}

    assert {model: page.status_code for model, page in pages.items()} == dict.fromkeys(world.a.by_model, 200)
    assert {model: leaked(page.content, world.b.markers) for model, page in pages.items()} == {
        model: [] for model in world.a.by_model
    }


def autocomplete_sources() -> list[tuple[type[Model], str]]:
    """Every relation of every registered model whose target admin can autocomplete."""
    sources = []
    for model in admin.site._registry:
        for field in model._meta.get_fields():
            if not (field.is_relation and field.concrete and (field.many_to_one or field.many_to_many)):
                continue
            target = admin.site._registry.get(field.related_model)
            if target is not None and target.search_fields:
                sources.append((model, field.name))
    return sources


def test_autocomplete_answers_only_rows_of_the_active_tenant(world: AdminWorld) -> None:
    client = signed_in(world.cast.alice)
    sources = autocomplete_sources()

    answers = {
        (model, name): client.get(
            reverse("admin:autocomplete"),
            {"app_label": model._meta.app_label, "model_name": model._meta.model_name, "field_name": name},
        )
        for model, name in sources
    }

    assert (Agent, "created_by") in answers and (Agent, "tenant") in answers
    assert {key: leaked(page.content, world.b.markers) for key, page in answers.items()} == {
        key: [] for key in answers
    }
    users = answers[(Agent, "created_by")].json()["results"]
    assert sorted(user["text"] for user in users) == ["alice@a.test", "bob@a.test", "victor@a.test"]
    assert [tenant["text"] for tenant in answers[(Agent, "tenant")].json()["results"]] == ["tenant-a"]


def test_dropdowns_offer_only_the_active_tenant_and_its_members(world: AdminWorld) -> None:
    page = signed_in(world.cast.alice).get(url_of(Agent, "add")).content.decode()

    assert f'<option value="{world.cast.tenant_a.pk}" selected>tenant-a</option>' in page
    assert str(world.cast.tenant_b.pk) not in page
    assert "bob@a.test" in page
    assert "carol@b.test" not in page


def test_another_tenants_row_is_refused_as_a_choice(world: AdminWorld) -> None:
    bravo_agent = world.b.by_model[Agent]
    client = signed_in(world.cast.alice)

    add = client.post(
        url_of(Agent, "add"),
        {
            "tenant": str(world.cast.tenant_b.pk),
            "name": "Smuggled",
            "model_provider": "offline",
            "temperature": "0.5",
            "max_steps": "5",
            "max_tokens": "100",
            "approval_required_tools": "[]",
            "planning_mode": "auto",
            "created_by": str(world.cast.carol.pk),
        },
    )

    assert add.status_code == 200
    assert b"Select a valid choice." in add.content
    assert leaked(add.content, world.b.markers) == []
    assert not Agent.objects.filter(name="Smuggled").exists()
    assert Agent.objects.get(pk=bravo_agent.pk).tenant_id == world.cast.tenant_b.pk


def test_raw_id_input_does_not_name_another_tenants_row(world: AdminWorld, monkeypatch: Any) -> None:
    monkeypatch.setattr(admin.site._registry[Agent], "raw_id_fields", ["created_by"])
    client = signed_in(world.cast.alice)

    answer = client.post(
        url_of(Agent, "change", world.a.by_model[Agent].pk),
        {
            "tenant": str(world.cast.tenant_a.pk),
            "name": "Alpha agent",
            "model_provider": "offline",
            "temperature": "0.5",
            "max_steps": "5",
            "max_tokens": "100",
            "approval_required_tools": "[]",
            "planning_mode": "auto",
            "created_by": str(world.cast.carol.pk),
        },
    )
    own = client.get(url_of(Agent, "change", world.a.by_model[Agent].pk))

    assert answer.status_code == 200
    assert b"Select a valid choice." in answer.content
    assert b"carol@b.test" not in answer.content
    assert Agent.objects.get(pk=world.a.by_model[Agent].pk).created_by_id == world.cast.alice.pk
    assert b"alice@a.test" in own.content


def test_list_filters_name_only_the_active_tenants_rows(world: AdminWorld) -> None:
    # A filter shows once it has two choices.
    second = make_agent(tenant=world.cast.tenant_a, name="Alpha second agent")
    Session.objects.create(tenant=world.cast.tenant_a, agent=second, title="Alpha second session")
    client = signed_in(world.cast.alice)

    sessions = client.get(url_of(Session, "changelist")).content.decode()
    filtered = client.get(
        url_of(Session, "changelist"), {"agent__id__exact": str(second.pk)}
    ).content.decode()
    memories = client.get(url_of(Memory, "changelist")).content.decode()

    assert "By agent" in sessions
    assert f'?agent__id__exact={second.pk}">Alpha second agent</a>' in sessions
    assert "By tenant" not in sessions
    assert ("Alpha second session" in filtered, "Alpha session" in filtered) == (True, False)
    assert "By tenant" not in memories
    assert leaked(sessions.encode(), world.b.markers) == []


def test_a_filter_by_another_tenant_finds_nothing(world: AdminWorld) -> None:
    client = signed_in(world.cast.alice)

    answer = client.get(url_of(Agent, "changelist"), {"tenant__id__exact": str(world.cast.tenant_b.pk)})

    assert answer.status_code == 200
    assert b"0 agents" in answer.content
    assert b"Bravo agent" not in answer.content


def test_superuser_still_sees_every_tenant(world: AdminWorld) -> None:
    root = User.objects.create_superuser("root@platform.test", "root@platform.test", "root-password")
    client = signed_in(root)

    agents = client.get(url_of(Agent, "changelist")).content.decode()
    add = client.get(url_of(Agent, "add")).content.decode()
    users = client.get(url_of(User, "changelist")).content.decode()

    assert "Alpha agent" in agents and "Bravo agent" in agents
    assert "By tenant" in agents and "tenant-b" in agents
    assert "carol@b.test" in add and "alice@a.test" in add
    assert "carol@b.test" in users


@pytest.mark.parametrize(
    "model",
    [
        Tenant,
        Membership,
        User,
        Agent,
        Session,
        Run,
        Step,
        RunEvent,
        Memory,
        Tool,
        McpServer,
        ApiKey,
        ProviderKey,
    ],
    ids=lambda model: model.__name__,
)
def test_another_tenants_row_is_not_reachable_and_nothing_changes(
    world: AdminWorld, model: type[Model]
) -> None:
    row = world.b.by_model[model]
    before = field_values(model._default_manager.get(pk=row.pk))
    client = signed_in(world.cast.alice)

    change_page = client.get(url_of(model, "change", row.pk))
    history_page = client.get(url_of(model, "history", row.pk))
    change = client.post(
        url_of(model, "change", row.pk), {"name": "taken", "is_enabled": "", "role": "viewer"}
    )
    delete = client.post(url_of(model, "delete", row.pk), {"post": "yes"})

    # The admin answers a row outside the user's scope as a missing one: a redirect to its
    # index, or the 403 it gives for any row of a kind this user may not change or delete.
    assert (change_page.status_code, history_page.status_code, change.status_code, delete.status_code) == (
        302,
        302,
        302 if model in CHANGEABLE_BY_TENANT_OWNERS else 403,
        302 if model in DELETABLE_BY_TENANT_OWNERS else 403,
    )
    assert change_page["Location"] == reverse("admin:index")
    assert field_values(model._default_manager.get(pk=row.pk)) == before
