"""The chat page shows the branch shown: its turns, their n/m navigation and actions, its lane runs."""

from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions.models import Message
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer
from tests.test_branches_api import ask, regenerate
from tests.test_runs_api import start_session
from tests.web.test_chat_pages import chat_config

pytestmark = pytest.mark.django_db


@pytest.fixture
def session_id(cast: Cast, bob_api: APIClient, fake_model: FakeModelServer) -> str:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="claude-test")
    return start_session(bob_api, agent.pk)


def page_of(cast: Cast, session_id: str) -> str:
    client = Client()
    client.force_login(cast.bob)
    response = client.get(f"/chat/{session_id}/")
    assert response.status_code == 200
    return response.content.decode()


def answer_id(run_id: str) -> str:
    return str(Message.objects.get(run_id=run_id, role="assistant").pk)


def test_a_regenerated_answer_shows_alone_with_its_place_and_the_way_back(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "First answer")
    second = regenerate(bob_api, fake_model, first["run"]["id"], "Second answer")

    body = page_of(cast, session_id)

    assert "Second answer" in body
    assert "First answer" not in body
    assert body.count('class="turn turn-assistant" id="run-') == 1
    assert '<span class="branch-position" data-branch-position>2/2</span>' in body
    previous = answer_id(first["run"]["id"])
    assert f'aria-label="Previous branch" title="Previous branch" data-branch-target="{previous}"' in body
    assert 'aria-label="Next branch" title="Next branch" disabled' in body
    assert f'data-regenerate="{second["run"]["id"]}">Regenerate</button>' in body
    assert 'data-parent-id="" data-attachment-ids="" aria-label="Message">' in body


def test_a_regenerate_still_in_the_lane_has_its_turn_and_place_before_it_answers(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "First answer")
    pending = bob_api.post(f"/api/v1/runs/{first['run']['id']}/regenerate/").json()["run"]["id"]

    body = page_of(cast, session_id)

    shell = body[body.index(f'id="run-{pending}"') :]
    assert shell.index("2/2") < shell.index("</article>")
    assert f'data-regenerate="{pending}" hidden>Regenerate' in shell
    assert "First answer" not in body
    config = chat_config(body)
    assert [run["id"] for run in config["laneRuns"]] == [pending]
    assert config["offBranchRunIds"] == []


def test_a_run_answering_on_another_branch_is_followed_but_not_shown(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "First answer")
    pending = bob_api.post(f"/api/v1/runs/{first['run']['id']}/regenerate/").json()["run"]["id"]
    bob_api.post(
        f"/api/v1/sessions/{session_id}/branch/", {"message_id": answer_id(first["run"]["id"])}, format="json"
    )

    body = page_of(cast, session_id)

    assert "First answer" in body
    # The regenerate has no message yet: it counts as the answer after the one shown, and the way
    # to it is its question, whose newest answer is the one coming.
    assert '<span class="branch-position" data-branch-position>1/2</span>' in body
    assert 'aria-label="Previous branch" title="Previous branch" disabled' in body
    question = str(Message.objects.get(pk=answer_id(first["run"]["id"])).parent_id)
    assert f'aria-label="Next branch" title="Next branch" data-branch-target="{question}"' in body
    assert f'id="run-{pending}"' not in body
    config: dict[str, Any] = chat_config(body)
    assert config["offBranchRunIds"] == [pending]


def test_the_way_forward_from_an_earlier_answer_shows_the_answer_still_coming(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, session_id: str
) -> None:
    first = ask(bob_api, fake_model, session_id, "Q1", "First answer")
    pending = bob_api.post(f"/api/v1/runs/{first['run']['id']}/regenerate/").json()["run"]["id"]
    question = str(Message.objects.get(pk=answer_id(first["run"]["id"])).parent_id)
    branch = f"/api/v1/sessions/{session_id}/branch/"
    bob_api.post(branch, {"message_id": answer_id(first["run"]["id"])}, format="json")

    assert bob_api.post(branch, {"message_id": question}, format="json").status_code == 200

    body = page_of(cast, session_id)
    shell = body[body.index(f'id="run-{pending}"') :]
    assert shell.index("2/2") < shell.index("</article>")
    assert "First answer" not in body
    assert chat_config(body)["offBranchRunIds"] == []
