"""Memories (filters, review, edits) and tenant settings (members, API keys, limits) as pages."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from memory.models import Memory, MemoryStatus
from tenants.api_keys import hash_secret
from tenants.models import ApiKey, Invitation, Membership
from tests.factories import make_agent
from tests.web.conftest import World

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def memory(world: World, content: str, **fields: Any) -> Memory:
    fields.setdefault("agent", world.agent_a)
    return Memory.objects.create(tenant=fields["agent"].tenant, content=content, **fields)


def test_memories_filter_by_agent_type_status_and_words(world: World, client_for: ClientFor) -> None:
    other = make_agent(tenant=world.cast.tenant_a, name="Other")
    memory(world, "Bob prefers tea", type="preference")
    memory(world, "The office is in Lyon", type="fact")
    memory(world, "Suggested: Bob has a cat", status=MemoryStatus.SUGGESTED)
    memory(world, "Other agent knows SQL", agent=other)
    memory(world, "Carol's secret", agent=world.agent_b)
    client = client_for(world.cast.victor)

    def shown(query: str) -> list[str]:
        body = client.get(f"/memories/?{query}").content.decode()
        return sorted(
            text
            for text in [
                "Bob prefers tea",
                "The office is in Lyon",
                "Suggested: Bob has a cat",
                "Other agent knows SQL",
                "Carol",
            ]
            if text in body
        )

    assert shown("") == [
        "Bob prefers tea",
        "Other agent knows SQL",
        "Suggested: Bob has a cat",
        "The office is in Lyon",
    ]
    assert shown(f"agent={other.pk}") == ["Other agent knows SQL"]
    assert shown("type=preference") == ["Bob prefers tea"]
    assert shown("status=suggested") == ["Suggested: Bob has a cat"]
    assert shown("q=lyon") == ["The office is in Lyon"]
    assert shown(f"agent={world.agent_a.pk}&q=tea") == ["Bob prefers tea"]
    assert "1 suggested memory</strong> awaiting review" in client.get("/memories/").content.decode()


def test_approving_a_suggestion_over_htmx_swaps_its_row(world: World, client_for: ClientFor) -> None:
    suggestion = memory(world, "Bob has a cat", status=MemoryStatus.SUGGESTED)

    response = client_for(world.dave).post(f"/memories/{suggestion.pk}/approve/", HTTP_HX_REQUEST="true")

    suggestion.refresh_from_db()
    assert (suggestion.status, suggestion.reviewed_by) == ("active", world.dave)
    assert (
        response.content.decode()
        .strip()
        .startswith(f'<li class="card memory" id="memory-{suggestion.pk}" data-status="active">')
    )
    assert "Memory approved." in response["HX-Trigger"]


def test_editing_a_suggestion_then_approving_it(world: World, client_for: ClientFor) -> None:
    suggestion = memory(world, "Bob has a cat", status=MemoryStatus.SUGGESTED)
    client = client_for(world.dave)

    page = client.get(f"/memories/{suggestion.pk}/edit/").content.decode()
    response = client.post(
        f"/memories/{suggestion.pk}/edit/",
        {"type": "fact", "content": "Bob has two cats", "importance": "0.9"},
    )

    suggestion.refresh_from_db()
    assert "Edit and approve a suggestion" in page
    assert response.status_code == 302
    assert (suggestion.status, suggestion.content, suggestion.importance) == (
        "active",
        "Bob has two cats",
        0.9,
    )


def test_rejecting_and_deleting(world: World, client_for: ClientFor) -> None:
    suggestion = memory(world, "Wrong guess", status=MemoryStatus.SUGGESTED)
    kept = memory(world, "Keep me")
    client = client_for(world.dave)

    rejected = client.post(f"/memories/{suggestion.pk}/reject/")
    twice = client.post(f"/memories/{suggestion.pk}/reject/", HTTP_HX_REQUEST="true")
    deleted = client.post(f"/memories/{kept.pk}/delete/", HTTP_HX_REQUEST="true")

    suggestion.refresh_from_db()
    assert rejected.status_code == 302 and suggestion.status == "rejected"
    assert twice.status_code == 204 and "only suggested ones can be" in twice["HX-Trigger"]
    assert deleted.content == b"" and not Memory.objects.filter(pk=kept.pk).exists()


def test_adding_a_memory_and_its_errors(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)

    refused = client.post(
        "/memories/new/",
        {"agent": str(world.agent_a.pk), "type": "fact", "content": "   ", "importance": "0.5"},
    )
    added = client.post(
        "/memories/new/",
        {
            "agent": str(world.agent_a.pk),
            "type": "fact",
            "content": "Likes jazz",
            "importance": "0.8",
            "subject_user": str(world.cast.bob.pk),
        },
    )
    foreign = client.post(
        "/memories/new/",
        {"agent": str(world.agent_b.pk), "type": "fact", "content": "x", "importance": "0.5"},
    )

    assert refused.status_code == 400 and "This field is required." in refused.content.decode()
    assert added.status_code == 302
    saved = Memory.objects.get(content="Likes jazz")
    assert (saved.importance, saved.subject_user, saved.source, saved.status) == (
        0.8,
        world.cast.bob,
        "manual",
        "active",
    )
    assert foreign.status_code == 400 and "Select a valid choice." in foreign.content.decode()
    assert not Memory.objects.filter(agent=world.agent_b).exists()


def test_memory_controls_are_for_admins(world: World, client_for: ClientFor) -> None:
    suggestion = memory(world, "Bob has a cat", status=MemoryStatus.SUGGESTED)

    page = client_for(world.cast.bob).get("/memories/").content.decode()
    approve = client_for(world.cast.bob).post(f"/memories/{suggestion.pk}/approve/")

    assert "Approve" not in page and "Add memory" not in page
    assert approve.status_code == 403
    assert Memory.objects.get(pk=suggestion.pk).status == "suggested"


def test_roles_change_but_a_tenant_keeps_an_owner_and_only_owners_grant_owner(
    world: World, client_for: ClientFor
) -> None:
    alice_membership = Membership.objects.get(tenant=world.cast.tenant_a, user=world.cast.alice)
    bob_membership = Membership.objects.get(tenant=world.cast.tenant_a, user=world.cast.bob)

    promoted = client_for(world.cast.alice).post(
        f"/settings/members/{bob_membership.pk}/role/", {"role": "admin"}
    )
    last_owner = client_for(world.cast.alice).post(
        f"/settings/members/{alice_membership.pk}/role/", {"role": "member"}, follow=True
    )
    by_admin = client_for(world.dave).post(f"/settings/members/{bob_membership.pk}/role/", {"role": "owner"})
    remove_owner = client_for(world.dave).post(f"/settings/members/{alice_membership.pk}/remove/")

    assert promoted.status_code == 302
    assert "A tenant keeps at least one owner" in last_owner.content.decode()
    assert by_admin.status_code == 403 and remove_owner.status_code == 403
    roles = dict(Membership.objects.filter(tenant=world.cast.tenant_a).values_list("user__username", "role"))
    assert roles == {
        "alice@a.test": "owner",
        "bob@a.test": "admin",
        "victor@a.test": "viewer",
        "dave@a.test": "admin",
    }


def test_an_api_key_is_shown_once_then_only_its_prefix(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)

    created = client.post("/settings/api-keys/", {"name": "CI", "scope": "read", "expires_in_days": "30"})
    body = created.content.decode()
    key = ApiKey.objects.get(tenant=world.cast.tenant_a, name="CI")
    start = body.index('id="new-key" class="mono" type="text" readonly value="') + len(
        'id="new-key" class="mono" type="text" readonly value="'
    )
    plaintext = body[start : body.index('"', start)]
    later = client.get("/settings/").content.decode()

    assert created.status_code == 200 and created["Cache-Control"] == "no-store"
    assert plaintext.startswith(f"agt_{key.prefix}_")
    assert key.secret_hash == hash_secret(plaintext.split("_", 2)[2])
    assert (key.scope, key.created_by, key.expires_at is not None) == ("read", world.dave, True)
    assert plaintext not in later and f"agt_{key.prefix}_…" in later


def test_revoking_an_api_key(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)
    client.post("/settings/api-keys/", {"name": "CI", "scope": "write"})
    key = ApiKey.objects.get(name="CI")

    response = client.post(f"/settings/api-keys/{key.pk}/revoke/")

    key.refresh_from_db()
    assert response.status_code == 302 and key.revoked_at is not None
    assert ">revoked</span>" in client.get("/settings/").content.decode()


def test_owners_change_limits_and_admins_only_read_them(world: World, client_for: ClientFor) -> None:
    limits = {
        "max_agents": "5",
        "run_timeout_seconds": "600",
        "messages_per_minute_per_user": "10",
        "model_tokens_per_minute": "1000",
        "active_runs_per_user": "2",
    }

    saved = client_for(world.cast.alice).post("/settings/limits/", limits)
    invalid = client_for(world.cast.alice).post("/settings/limits/", {**limits, "max_agents": "0"})
    by_admin = client_for(world.dave).post("/settings/limits/", {**limits, "max_agents": "99"})
    admin_page = client_for(world.dave).get("/settings/").content.decode()

    world.cast.tenant_a.refresh_from_db()
    assert saved.status_code == 302
    assert world.cast.tenant_a.settings == {
        "max_agents": 5,
        "run_timeout_seconds": 600,
        "messages_per_minute_per_user": 10,
        "model_tokens_per_minute": 1000,
        "active_runs_per_user": 2,
    }
    assert (
        invalid.status_code == 400
        and "Must be a whole number between 1 and 1,000,000,000." in invalid.content.decode()
    )
    assert by_admin.status_code == 403
    assert "Only owners change limits." in admin_page and "Save limits" not in admin_page


def test_settings_are_for_admins_and_owners(world: World, client_for: ClientFor) -> None:
    member = client_for(world.cast.bob).post("/settings/members/", {"email": "x@a.test", "role": "member"})

    assert member.status_code == 403
    assert not Invitation.objects.exists()
