"""Agent pages: the form with inline errors, tools and profile, detail, delete."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from agents.models import Agent
from tests.web.conftest import World
from tools.models import AgentTool, Tool, ToolKind, ToolPolicy

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def agent_fields(**overrides: Any) -> dict[str, Any]:
    return {
        "name": "Researcher",
        "description": "Finds things",
        "goal": "Answer with sources",
        "system_prompt": "Be brief.",
        "model_provider": "anthropic",
        "model_name": "",
        "temperature": "0.3",
        "max_steps": "12",
        "max_tokens": "2048",
        "tool_profile": "coding",
        "run_timeout_seconds": "",
        "context_compaction_enabled": "on",
        "planning_mode": "plan",
        "is_active": "on",
        **overrides,
    }


def test_creating_an_agent_saves_its_model_profile_and_tools(world: World, client_for: ClientFor) -> None:
    lookup = Tool.objects.create(
        tenant=world.cast.tenant_a,
        name="lookup",
        kind=ToolKind.HTTP,
        http_method="GET",
        url_template="https://example.com/{q}",
    )

    response = client_for(world.dave).post("/agents/new/", agent_fields(tools=[str(lookup.pk)]))

    agent = Agent.objects.get(tenant=world.cast.tenant_a, name="Researcher")
    assert (response.status_code, response["Location"]) == (302, f"/agents/{agent.pk}/")
    assert (agent.model_provider, agent.temperature, agent.max_steps, agent.max_tokens) == (
        "anthropic",
        0.3,
        12,
        2048,
    )
    assert agent.approval_required_tools == []
    assert (agent.created_by, agent.run_timeout_seconds, agent.is_active) == (world.dave, None, True)
    assert agent.planning_mode == "plan"
    assert ToolPolicy.objects.get(agent=agent).profile == "coding"
    assert list(AgentTool.objects.filter(agent=agent).values_list("tool__name", flat=True)) == ["lookup"]


def test_the_form_shows_each_services_error_next_to_its_field(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.alice).post(
        "/agents/new/", agent_fields(name="Helper", temperature="1.5", max_steps="0")
    )
    body = response.content.decode()

    assert response.status_code == 400
    assert "An agent with this name already exists in this tenant." in body
    assert "Must be between 0.0 and 1.0 for anthropic." in body
    assert "Must be between 1 and 100." in body
    assert body.rindex("An agent with this name already exists") > body.index('id="field-name"')
    assert body.rindex("Must be between 0.0 and 1.0") > body.index('id="field-temperature"')
    assert 'aria-invalid="true"' in body
    assert list(Agent.objects.filter(tenant=world.cast.tenant_a).values_list("name", flat=True)) == ["Helper"]


def test_missing_fields_are_refused_by_the_form_with_nothing_saved(
    world: World, client_for: ClientFor
) -> None:
    response = client_for(world.cast.alice).post("/agents/new/", agent_fields(name="", max_tokens="lots"))
    body = response.content.decode()

    assert response.status_code == 400
    assert "This field is required." in body and "Enter a whole number." in body
    assert Agent.objects.filter(tenant=world.cast.tenant_a).count() == 1


def test_the_form_shows_sliders_with_their_values_and_the_offline_note(
    world: World, client_for: ClientFor
) -> None:
    body = client_for(world.cast.alice).get(f"/agents/{world.agent_a.pk}/edit/").content.decode()

    assert 'type="range" name="temperature" value="0.7"' in body
    assert '<output id="id_temperature_value" for="id_temperature" aria-live="polite">0.7</output>' in body
    assert '<output id="id_max_steps_value" for="id_max_steps" aria-live="polite">20</output>' in body
    assert "The offline demo model is a local stand-in, not an LLM" in body


def test_editing_an_agent_keeps_what_was_not_changed(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.alice).post(
        f"/agents/{world.agent_a.pk}/edit/",
        agent_fields(
            name="Helper", description="Helps with sums", model_provider="offline", temperature="0.7"
        ),
    )

    world.agent_a.refresh_from_db()
    assert response.status_code == 302
    assert (world.agent_a.name, world.agent_a.max_steps, world.agent_a.goal) == (
        "Helper",
        12,
        "Answer with sources",
    )


def test_the_detail_page_shows_model_tools_and_conversations(world: World, client_for: ClientFor) -> None:
    body = client_for(world.cast.victor).get(f"/agents/{world.agent_a.pk}/").content.decode()

    assert "Helper" in body and "Helps with sums" in body
    assert "Minimal: time, math, memory" in body
    assert ">calculator" in body
    assert "Bob&#x27;s sums" in body


def test_deleting_asks_first_then_deletes_on_post(world: World, client_for: ClientFor) -> None:
    client = client_for(world.cast.alice)

    confirmation = client.get(f"/agents/{world.agent_a.pk}/delete/")
    detail = client.get(f"/agents/{world.agent_a.pk}/").content.decode()
    deleted = client.post(f"/agents/{world.agent_a.pk}/delete/")

    assert confirmation.status_code == 200 and "It cannot be undone." in confirmation.content.decode()
    assert '<dialog id="delete-agent"' in detail and 'data-confirm="delete-agent"' in detail
    assert (deleted.status_code, deleted["Location"]) == (302, "/agents/")
    assert not Agent.objects.filter(pk=world.agent_a.pk).exists()
    assert Agent.objects.filter(pk=world.agent_b.pk).exists()


def test_members_cannot_delete_agents(world: World, client_for: ClientFor) -> None:
    response = client_for(world.cast.bob).post(f"/agents/{world.agent_a.pk}/delete/")

    assert response.status_code == 403
    assert Agent.objects.filter(pk=world.agent_a.pk).exists()


def test_a_new_agent_plans_automatically_unless_its_planning_is_changed(
    world: World, client_for: ClientFor
) -> None:
    body = client_for(world.cast.alice).get("/agents/new/").content.decode()

    assert '<option value="auto" selected>Auto</option>' in body
    assert '<option value="direct">Direct</option>' in body


def test_the_planning_help_says_the_first_model_call_decides(world: World, client_for: ClientFor) -> None:
    planning = field_block(client_for(world.cast.alice).get("/agents/new/").content.decode(), "planning_mode")

    assert (
        "Auto: the agent&#x27;s own first model call decides whether to answer, use tools or call" in planning
    )
    assert "classif" not in planning


def field_block(body: str, name: str) -> str:
    """The markup of one field's ``<div class="field">``, up to the next field."""
    start = body.index(f'id="field-{name}"')
    following = body.find('id="field-', start + 1)
    return body[start : following if following != -1 else len(body)]


def test_every_field_error_shows_at_once_with_a_summary_linking_to_each(
    world: World, client_for: ClientFor
) -> None:
    response = client_for(world.cast.alice).post(
        "/agents/new/",
        agent_fields(
            name="   ",
            temperature="1.5",
            max_steps="0",
            max_tokens="many",
            run_timeout_seconds="0",
            planning_mode="sometimes",
        ),
    )
    body = response.content.decode()

    expected = {
        "name": "This field is required.",
        "temperature": "Must be between 0.0 and 1.0 for anthropic.",
        "max_steps": "Must be between 1 and 100.",
        "max_tokens": "Enter a whole number.",
        "run_timeout_seconds": "Must be between 1 and 86400.",
        "planning_mode": "Select a valid choice. sometimes is not one of the available choices.",
    }
    assert response.status_code == 400
    summary = body[body.index("data-error-summary") : body.index("</div>", body.index("data-error-summary"))]
    assert "Please fix these 6 problems:" in summary
    labels = {
        "name": "Name",
        "temperature": "Temperature",
        "max_steps": "Max steps",
        "max_tokens": "Max output tokens",
        "run_timeout_seconds": "Run timeout (seconds)",
        "planning_mode": "Planning",
    }
    for name, message in expected.items():
        assert f'<a href="#id_{name}">{labels[name]}: {message}</a>' in summary
        block = field_block(body, name)
        assert f'<ul class="errors" id="id_{name}_error"><li>{message}</li></ul>' in block
        assert 'aria-invalid="true"' in block
        assert f"id_{name}_error" in block[block.index("aria-describedby") :]
    assert 'aria-invalid="true"' not in field_block(body, "description")
    assert list(Agent.objects.filter(tenant=world.cast.tenant_a).values_list("name", flat=True)) == ["Helper"]


def test_the_agent_form_shows_approvals_read_only_and_links_to_the_tool_policy(
    world: World, client_for: ClientFor
) -> None:
    ToolPolicy.objects.create(agent=world.agent_a, require_approval=["web_fetch"])
    Agent.objects.filter(pk=world.agent_a.pk).update(approval_required_tools=["calculator"])

    body = client_for(world.cast.alice).get(f"/agents/{world.agent_a.pk}/edit/").content.decode()

    assert 'name="approval_required_tools"' not in body
    assert (
        "Calls that need a person's approval: <strong>web_fetch, calculator</strong>. Choose them, "
        "with allow and deny lists and call caps, on the "
        f'<a href="/agents/{world.agent_a.pk}/tools/">tool policy page</a>.'
    ) in body


def test_saving_the_agent_form_keeps_the_approvals_set_on_the_policy_page(
    world: World, client_for: ClientFor
) -> None:
    Agent.objects.filter(pk=world.agent_a.pk).update(approval_required_tools=["calculator"])

    response = client_for(world.cast.alice).post(
        f"/agents/{world.agent_a.pk}/edit/", agent_fields(name="Helper", model_provider="offline")
    )

    assert response.status_code == 302
    assert Agent.objects.get(pk=world.agent_a.pk).approval_required_tools == ["calculator"]
