"""The acceptance path with a real worker: documents uploaded over the API are extracted by the
django-q2 cluster of another process, and a run there cites the page that holds the answer;
a member's PDF bombs hold that cluster's one worker for no more than their budget, and another
tenant's document takes its turn between them."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from files.models import StoredFile
from sessions.models import Run, Step
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.files.documents import docx_bytes, page_bomb_pdf_bytes, pdf_bytes
from tests.files.test_extraction_limits import attached_file
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


@pytest.fixture
def one_worker_with_a_small_budget(tmp_path: Path) -> Iterator[LiveStack]:
    """The default deployment's one cluster worker, with a budget small enough for a test."""
    stack = LiveStack(tmp_path, FILES_EXTRACTION_CPU_SECONDS="2", FILES_EXTRACTION_WALL_SECONDS="15")
    stack.start_worker(workers=1)
    yield stack
    stack.stop()


def test_a_members_2000_page_bombs_leave_another_tenants_document_its_turn(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, one_worker_with_a_small_budget: LiveStack
) -> None:
    worker = one_worker_with_a_small_budget
    bomb = page_bomb_pdf_bytes(pages=2000)
    bombs = [attached_file(bob_api, cast.tenant_a, f"handbook-{number}.pdf", bomb) for number in (1, 2, 3)]
    wait_until(
        lambda: file_status(bob_api, bombs[0]) == "processing",
        timeout=60,
        message=f"the worker to take the first bomb\n{worker.logs()}",
    )

    rota = attached_file(carol_api, cast.tenant_b, "rota.pdf", pdf_bytes(["Roses are watered on Tuesdays."]))
    wait_until(
        lambda: file_status(carol_api, rota) == "ready",
        timeout=40,
        message=f"carol's document to be extracted between bob's bombs\n{worker.logs()}",
    )

    rota_done = StoredFile.objects.get(pk=rota).processed_at
    assert rota_done is not None
    first = bob_api.get(f"/api/v1/files/{bombs[0]}/").json()
    assert (first["status"], first["status_reason"]) == (
        "failed",
        "the document is too large to extract within the limits: reading it needed more than "
        "2 seconds of processing; split it into smaller files and upload them again",
    )
    later_starts = StoredFile.objects.filter(pk__in=bombs[1:]).values_list("processing_started_at", flat=True)
    assert [started for started in later_starts if started is not None and started < rota_done] == []
    for file_id in bombs[1:]:
        assert bob_api.delete(f"/api/v1/files/{file_id}/").status_code == 204
