"""A conversation exported as Markdown and as JSON: what people said, what they attached, and
the agent's answers with the passages they cite."""

import json

import pytest
from rest_framework.test import APIClient

from files.models import Chunk, Citation, StoredFile
from sessions.models import Message, Run, Session
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.files.test_files_api import attach, post, processed, start_session

pytestmark = pytest.mark.django_db


def conversation(cast: Cast, api: APIClient, fake_model: FakeModelServer) -> tuple[str, str]:
    agent = make_agent(tenant=cast.tenant_a, name="Gardener", model_provider="anthropic", model_name="m")
    session_id = start_session(api, agent.pk)
    notes = attach(api, session_id, "notes.md", b"# Plan\nBuy seeds on Friday.\n").json()
    processed(notes["id"])
    fake_model.script(Turn(text="On Friday [1]."))
    run_id = post(api, session_id, "When do we buy seeds?", [notes["id"]]).json()["run"]["id"]
    execute_run(run_id)
    chunk = Chunk.objects.get(file_id=notes["id"])
    Citation.objects.create(tenant=cast.tenant_a, run_id=run_id, number=1, chunk=chunk)
    return session_id, notes["id"]


def test_markdown_holds_the_questions_attachments_answers_and_sources(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id, _ = conversation(cast, alice_api, fake_model)

    response = alice_api.get(f"/api/v1/sessions/{session_id}/export/")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/markdown; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="conversation-{session_id}.md"'
    assert response.content.decode() == (
        "# When do we buy seeds?\n\nWith Gardener.\n\n"
        "## You\n\nWhen do we buy seeds?\n\n- Attached: notes.md\n\n"
        "## Gardener\n\nOn Friday [1].\n\n- [1] notes.md\n"
    )


def test_json_holds_the_same_as_data(cast: Cast, alice_api: APIClient, fake_model: FakeModelServer) -> None:
    session_id, file_id = conversation(cast, alice_api, fake_model)

    response = alice_api.get(f"/api/v1/sessions/{session_id}/export/", {"as": "json"})
    document = json.loads(response.content)

    assert response["Content-Type"] == "application/json; charset=utf-8"
    assert document["session"]["title"] == "When do we buy seeds?"
    assert document["session"]["agent"] == "Gardener"
    assert [(m["role"], m["text"]) for m in document["messages"]] == [
        ("user", "When do we buy seeds?"),
        ("assistant", "On Friday [1]."),
    ]
    assert document["messages"][0]["attachments"] == [
        {"file_id": file_id, "name": "notes.md", "content_type": "text/markdown", "size": 28}
    ]
    [citation] = document["messages"][1]["citations"]
    assert (citation["number"], citation["document"], citation["file_id"]) == (1, "notes.md", file_id)


def test_another_tenant_gets_404_and_an_unknown_kind_a_400(
    cast: Cast, alice_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    session_id, _ = conversation(cast, alice_api, fake_model)
    counts = (Message.objects.count(), Run.objects.count(), StoredFile.objects.count())

    theirs = carol_api.get(f"/api/v1/sessions/{session_id}/export/")
    unknown = alice_api.get(f"/api/v1/sessions/{session_id}/export/", {"as": "pdf"})

    assert theirs.status_code == 404
    assert (unknown.status_code, unknown.json()["error"]["fields"]) == (
        400,
        {"as": ["Choose markdown or json."]},
    )
    assert counts == (Message.objects.count(), Run.objects.count(), StoredFile.objects.count())


def test_markdown_escapes_the_title_the_agents_name_and_what_people_typed_but_not_the_answers(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="R&D *bot*", model_provider="anthropic", model_name="m")
    fake_model.script(Turn(text="6*7 = **42**."))
    session_id = start_session(alice_api, agent.pk)
    alice_api.patch(f"/api/v1/sessions/{session_id}/", {"title": "Sums_v2 #1"}, format="json")
    run_id = post(alice_api, session_id, "1. What is 6*7?\n2. What time is it?").json()["run"]["id"]
    execute_run(run_id)

    markdown = alice_api.get(f"/api/v1/sessions/{session_id}/export/").content.decode()

    assert markdown == (
        "# Sums\\_v2 #1\n\nWith R\\&D \\*bot\\*.\n\n"
        "## You\n\n1\\. What is 6\\*7?\n2\\. What time is it?\n\n"
        "## R\\&D \\*bot\\*\n\n6*7 = **42**.\n"
    )


def test_a_title_of_several_lines_is_one_heading_in_markdown(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, name="Helper", model_provider="anthropic", model_name="m")
    fake_model.script(Turn(text="Done."))
    session_id = start_session(alice_api, agent.pk)
    run_id = post(alice_api, session_id, "1. What is 6*7?\n2. What time is it?").json()["run"]["id"]
    execute_run(run_id)
    Session.objects.filter(pk=session_id).update(title="1. What is 6*7?\n2. What time is it?")

    markdown = alice_api.get(f"/api/v1/sessions/{session_id}/export/").content.decode()

    assert markdown.splitlines()[:3] == ["# 1\\. What is 6\\*7? 2. What time is it?", "", "With Helper."]
