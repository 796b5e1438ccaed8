"""A plan's run page lists its executors and sub-agents; each child's page links back to its parent;
the runs API says the same (``parent_run``, ``children``)."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions.models import Run, RunStatus
from tests.web.conftest import World

ClientFor = Callable[[Any], Client]


def plan_with_children(world: World) -> tuple[Run, Run, Run]:
    """Bob's finished run with an executor (a plan step) and a sub-agent (a spawn_subagent call)."""
    parent = world.run_a

    def child(title: str, status: str, **fields: Any) -> Run:
        return Run.objects.create(
            tenant=parent.tenant,
            session=parent.session,
            agent=parent.agent,
            created_by=parent.created_by,
            parent_run=parent,
            title=title,
            status=status,
            input_tokens=40,
            output_tokens=2,
            **fields,
        )

    executor = child("s1: What is 6*7?", RunStatus.COMPLETED, stop_reason="end_turn")
    subagent = child(
        "Look up the time", RunStatus.FAILED, stop_reason="llm_error", parent_tool_call_id="call_9"
    )
    return parent, executor, subagent


@pytest.mark.django_db
def test_a_plans_page_lists_its_children_with_links_and_statuses(world: World, client_for: ClientFor) -> None:
    parent, executor, subagent = plan_with_children(world)

    body = client_for(world.cast.bob).get(f"/runs/{parent.pk}/").content.decode()

    listing = body[body.index('<ul class="list" data-child-runs>') :]
    listing = listing[: listing.index("</ul>")]
    assert listing.count('<li class="list-row">') == 2
    assert (
        f'<a class="list-main" href="/runs/{executor.pk}/">'
        '<span class="list-title">Executor: s1: What is 6*7?' in listing
    )
    assert (
        f'<a class="list-main" href="/runs/{subagent.pk}/">'
        '<span class="list-title">Sub-agent: Look up the time' in listing
    )
    assert '<span class="badge tone-ok">completed</span>' in listing
    assert '<span class="badge tone-error">failed</span>' in listing
    assert listing.index(str(executor.pk)) < listing.index(str(subagent.pk))
    assert "data-parent-run" not in body


@pytest.mark.django_db
@pytest.mark.parametrize(("which", "kind"), [(1, "Executor"), (2, "Sub-agent")])
def test_a_child_runs_page_links_back_to_its_parent(
    world: World, client_for: ClientFor, which: int, kind: str
) -> None:
    family = plan_with_children(world)
    parent, child = family[0], family[which]

    body = client_for(world.cast.bob).get(f"/runs/{child.pk}/").content.decode()

    back = body[body.index("<p data-parent-run>") :]
    back = back[: back.index("</p>")]
    assert back == (
        f"<p data-parent-run>{kind} “{child.title}” of run "
        f'<a href="/runs/{parent.pk}/" class="mono">{str(parent.pk)[:8]}</a> '
        '<span class="badge tone-ok">completed</span>'
    )
    assert "data-child-runs" not in body


@pytest.mark.django_db
def test_the_runs_api_lists_a_runs_children_and_a_child_names_its_parent(
    world: World, bob_api: APIClient
) -> None:
    parent, executor, subagent = plan_with_children(world)

    parent_data = bob_api.get(f"/api/v1/runs/{parent.pk}/").json()
    child_data = bob_api.get(f"/api/v1/runs/{subagent.pk}/").json()

    assert [
        (child["id"], child["title"], child["parent_tool_call_id"], child["status"], child["stop_reason"])
        for child in parent_data["children"]
    ] == [
        (str(executor.pk), "s1: What is 6*7?", "", "completed", "end_turn"),
        (str(subagent.pk), "Look up the time", "call_9", "failed", "llm_error"),
    ]
    assert (child_data["parent_run"], child_data["children"]) == (str(parent.pk), [])
    assert parent_data["parent_run"] is None


@pytest.mark.django_db
def test_another_tenants_child_run_is_404_on_the_page_and_the_api_and_nothing_changes(
    world: World, client_for: ClientFor, carol_api: APIClient
) -> None:
    parent, executor, _ = plan_with_children(world)
    before = list(Run.objects.order_by("pk").values())

    page = client_for(world.cast.carol).get(f"/runs/{executor.pk}/")
    api = carol_api.get(f"/api/v1/runs/{parent.pk}/")

    assert (page.status_code, api.status_code) == (404, 404)
    assert "s1: What is 6*7?" not in page.content.decode() + api.content.decode()
    assert list(Run.objects.order_by("pk").values()) == before
