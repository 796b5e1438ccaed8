"""The acceptance path with a real worker: documents uploaded over the API are extracted by the
django-q2 cluster of another process, and a run there cites the page that holds the answer."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from sessions.models import Run, Step
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.files.documents import docx_bytes
from tests.files.test_files_api import (
    ANSWER_SENTENCE,
    add_document,
    create_knowledge_base,
    post,
    start_session,
    twenty_pages,
    words,
)
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def worker(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    stack = LiveStack(tmp_path, ANTHROPIC_API_KEY="test-anthropic-key", ANTHROPIC_BASE_URL=fake_model.url)
    stack.start_worker(workers=2)
    yield stack
    stack.stop()


def file_status(api: APIClient, file_id: str) -> str:
    return str(api.get(f"/api/v1/files/{file_id}/").json()["status"])


def test_uploaded_documents_become_ready_on_the_worker_and_a_run_there_cites_page_14(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, worker: LiveStack
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    knowledge_base_id = create_knowledge_base(alice_api, agent_ids=[str(agent.pk)])
    pdf = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages()).json()
    docx = add_document(
        alice_api, knowledge_base_id, "rota.docx", docx_bytes([("Normal", "Roses are watered on Tuesdays.")])
    ).json()
    file_ids = [pdf["file"]["id"], docx["file"]["id"]]

    wait_until(
        lambda: [file_status(alice_api, file_id) for file_id in file_ids] == ["ready", "ready"],
        timeout=60,
        message=f"both documents to be ready\n{worker.logs()}",
    )
    fake_model.script(
        Turn(tool_calls=[("file_search", {"query": "capybara hay per week"})]),
        Turn(text="Forty kilograms a week [1]."),
        match="worker-knowledge",
    )
    session_id = start_session(alice_api, agent.pk)
    run_id = post(alice_api, session_id, "worker-knowledge: how much hay?").json()["run"]["id"]
    wait_until(
        lambda: Run.objects.filter(pk=run_id, status="completed").exists(),
        timeout=60,
        message=f"the run to complete\n{worker.logs()}",
    )

    result = Step.objects.get(run_id=run_id, kind="tool_call").output["content"]
    assert result.startswith("[1] estate-handbook.pdf, page 14\n")
    answer = alice_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"][-1]
    assert [(c["number"], c["document"], c["page"]) for c in answer["citations"]] == [
        (1, "estate-handbook.pdf", 14)
    ]
    assert ANSWER_SENTENCE in words(answer["citations"][0]["passage"])
