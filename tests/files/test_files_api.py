"""Files and knowledge over the API: uploads, extraction, file_search with citations, images
for vision models, tenant isolation and bad input. Runs execute in-process (``execute_run``)."""

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from files.models import Chunk, Citation, KnowledgeBase, KnowledgeDocument, StoredFile
from files.tasks import process_file_task
from sessions.models import Message, Run, Session, Step
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import field_values, last_placed_message_id, make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.files.documents import (
    docx_bytes,
    elf_bytes,
    encrypted_pdf_bytes,
    pdf_bytes,
    png_bytes,
    zip_bomb_docx_bytes,
)

pytestmark = pytest.mark.django_db

ANSWER_SENTENCE = "The capybara colony on the estate eats exactly forty kilograms of hay each week."


def twenty_pages() -> bytes:
    pages = [
        f"Chapter {number}. Notes about the estate's gardens, number {number}." for number in range(1, 21)
    ]
    pages[13] = f"Chapter 14. Feeding. {ANSWER_SENTENCE}"
    return pdf_bytes(pages)


def words(text: str) -> str:
    """The text with its layout's line breaks as spaces (a PDF wraps lines where its page ends them)."""
    return " ".join(text.split())


def upload(name: str, data: bytes, content_type: str = "application/octet-stream") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, data, content_type=content_type)


def create_knowledge_base(api: APIClient, name: str = "Estate", agent_ids: list[str] | None = None) -> str:
    response = api.post(
        "/api/v1/knowledge-bases/", {"name": name, "agent_ids": agent_ids or []}, format="json"
    )
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def add_document(api: APIClient, knowledge_base_id: str, name: str, data: bytes) -> Any:
    return api.post(
        f"/api/v1/knowledge-bases/{knowledge_base_id}/documents/",
        {"file": upload(name, data)},
        format="multipart",
    )


def processed(file_id: str) -> StoredFile:
    process_file_task(file_id)
    return StoredFile.objects.get(pk=file_id)


def start_session(api: APIClient, agent_id: object) -> str:
    response = api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def attach(api: APIClient, session_id: str, name: str, data: bytes) -> Any:
    return api.post("/api/v1/files/", {"file": upload(name, data), "session": session_id}, format="multipart")


def post(api: APIClient, session_id: str, content: str, attachments: list[str] | None = None) -> Any:
    return api.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"content": content, "attachments": attachments or []},
        format="json",
    )


def stored_blobs(files_root: Path) -> set[str]:
    return {str(path.relative_to(files_root)) for path in files_root.rglob("*") if path.is_file()}


# --- Upload, extraction, search, citations ------------------------------------------------------


@pytest.mark.django_db(transaction=True)  # the tool runs on a thread of its own, with its own connection
def test_pdf_and_docx_become_ready_and_an_agent_cites_page_14(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    knowledge_base_id = create_knowledge_base(alice_api, agent_ids=[str(agent.pk)])
    pdf = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages())
    docx = add_document(
        alice_api,
        knowledge_base_id,
        "rota.docx",
        docx_bytes([("Heading 1", "Rota"), ("Normal", "Gardeners water the roses on Tuesdays.")]),
    )
    assert (pdf.status_code, docx.status_code) == (201, 201), (pdf.content, docx.content)
    assert pdf.json()["file"]["status"] == "queued"
    assert pdf.json()["file"]["content_type"] == "application/pdf"

    handbook = processed(pdf.json()["file"]["id"])
    rota = processed(docx.json()["file"]["id"])
    assert (handbook.status, handbook.page_count, rota.status) == ("ready", 20, "ready")
    assert rota.content_type == "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    read = alice_api.get(f"/api/v1/files/{handbook.pk}/").json()
    assert (read["status"], read["page_count"], read["knowledge_base"]) == ("ready", 20, knowledge_base_id)

    fake_model.script(
        Turn(tool_calls=[("file_search", {"query": "how much hay do the capybaras eat"})]),
        Turn(text="They eat forty kilograms of hay a week [1]."),
    )
    session_id = start_session(alice_api, agent.pk)
    run_id = post(alice_api, session_id, "How much hay do the capybaras eat?").json()["run"]["id"]
    execute_run(run_id)

    tool_step = Step.objects.get(run_id=run_id, kind="tool_call")
    result = tool_step.output["content"]
    assert result.startswith("[1] estate-handbook.pdf, page 14\n")
    assert ANSWER_SENTENCE in words(result.split("\n\n")[0])
    messages = alice_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    answer = messages[-1]
    assert answer["text"] == "They eat forty kilograms of hay a week [1]."
    assert [(c["number"], c["document"], c["page"], c["file_id"]) for c in answer["citations"]] == [
        (1, "estate-handbook.pdf", 14, str(handbook.pk))
    ]
    assert ANSWER_SENTENCE in words(answer["citations"][0]["passage"])
    completed = [e for e in alice_api.get(f"/api/v1/runs/{run_id}/events/").json()["results"]]
    final = [e for e in completed if e["type"] == "message.completed"][-1]
    assert [c["page"] for c in final["data"]["citations"]] == [14]


def test_the_knowledge_base_search_endpoint_finds_the_passage_with_its_page(
    cast: Cast, alice_api: APIClient
) -> None:
    knowledge_base_id = create_knowledge_base(alice_api)
    document = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages()).json()
    processed(document["file"]["id"])

    found = alice_api.get(
        f"/api/v1/knowledge-bases/{knowledge_base_id}/search/", {"q": "capybara hay"}
    ).json()

    assert (found[0]["document"], found[0]["page"]) == ("estate-handbook.pdf", 14)
    assert ANSWER_SENTENCE in words(found[0]["text"])


def test_file_search_is_offered_only_to_runs_with_something_to_search(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    fake_model.script(Turn(text="Hello."), Turn(text="Hello again."))
    session_id = start_session(alice_api, agent.pk)
    execute_run(post(alice_api, session_id, "Hi").json()["run"]["id"])
    create_knowledge_base(alice_api, agent_ids=[str(agent.pk)])
    execute_run(post(alice_api, session_id, "Hi again").json()["run"]["id"])

    offered = [[tool["name"] for tool in request.body.get("tools", [])] for request in fake_model.requests]
    assert ["file_search" in names for names in offered] == [False, True]


def test_a_small_attached_document_goes_into_the_context_whole(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    session_id = start_session(alice_api, agent.pk)
    attached = attach(alice_api, session_id, "notes.md", b"# Plan\nBuy seeds on Friday.\n").json()
    processed(attached["id"])
    fake_model.script(Turn(text="Friday."))

    posted = post(alice_api, session_id, "When do we buy seeds?", [attached["id"]])
    execute_run(posted.json()["run"]["id"])

    assert posted.json()["message"]["content"][1] == {
        "type": "attachment",
        "file_id": attached["id"],
        "name": "notes.md",
        "content_type": "text/markdown",
        "size": 28,
    }
    user_turn = fake_model.requests[0].body["messages"][0]["content"]
    assert user_turn[0] == {"type": "text", "text": "When do we buy seeds?"}
    assert user_turn[1]["text"].startswith('<attachment name="notes.md" type="text/markdown">\n# Plan')
    assert "Buy seeds on Friday." in user_turn[1]["text"]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_an_attached_image_reaches_the_model_as_an_image_block(
    cast: Cast, alice_api: APIClient, fake_model: FakeModelServer, provider: str
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider=provider, model_name="test-model")
    session_id = start_session(alice_api, agent.pk)
    image = png_bytes(32, 24)
    attached = attach(alice_api, session_id, "chart.png", image)
    assert attached.status_code == 201, attached.content
    assert (attached.json()["status"], attached.json()["width"], attached.json()["height"]) == (
        "ready",
        32,
        24,
    )
    fake_model.script(Turn(text="A chart."))

    execute_run(post(alice_api, session_id, "What is this?", [attached.json()["id"]]).json()["run"]["id"])

    encoded = base64.b64encode(image).decode("ascii")
    if provider == "anthropic":
        expected = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": encoded}}
    else:
        expected = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{encoded}"}}
    assert fake_model.requests[0].images == [expected]
    assert encoded not in json.dumps(
        list(Step.objects.filter(run__session_id=session_id).values("input", "output"))
    )


def test_the_offline_model_says_what_it_received_of_an_image(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(alice_api, agent.pk)
    attached = attach(alice_api, session_id, "photo.png", png_bytes(64, 48)).json()

    run_id = post(alice_api, session_id, "What do you see?", [attached["id"]]).json()["run"]["id"]
    execute_run(run_id)

    answer = alice_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"][-1]["text"]
    assert answer.startswith(
        "I received an image (photo.png, image/png, 64\N{MULTIPLICATION SIGN}48 pixels, "
        f"{attached['size']:,} bytes). "
        "I am the offline demo model and cannot see what it shows."
    )


def test_a_download_gives_the_bytes_to_the_tenant_only(
    cast: Cast, alice_api: APIClient, carol_api: APIClient
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(alice_api, agent.pk)
    data = png_bytes(8, 8)
    attached = attach(alice_api, session_id, "dot.png", data).json()

    mine = alice_api.get(attached["download_url"])
    theirs = carol_api.get(attached["download_url"])

    assert (mine.status_code, b"".join(mine.streaming_content)) == (200, data)  # type: ignore[attr-defined]
    assert mine["Content-Type"] == "image/png"
    assert mine["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert theirs.status_code == 404


# --- Tenant isolation ---------------------------------------------------------------------------


def test_another_tenant_cannot_read_change_or_search_files_and_knowledge(
    cast: Cast, alice_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    knowledge_base_id = create_knowledge_base(alice_api, agent_ids=[str(agent.pk)])
    document = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages()).json()
    file_id = document["file"]["id"]
    processed(file_id)
    session_id = start_session(alice_api, agent.pk)
    attached = attach(alice_api, session_id, "dot.png", png_bytes(8, 8)).json()
    before = {
        "files": [field_values(f) for f in StoredFile.objects.order_by("pk")],
        "bases": [field_values(b) for b in KnowledgeBase.objects.order_by("pk")],
        "documents": KnowledgeDocument.objects.count(),
        "chunks": Chunk.objects.count(),
    }

    kb = f"/api/v1/knowledge-bases/{knowledge_base_id}/"
    answers = [
        carol_api.get(f"/api/v1/files/{file_id}/").status_code,
        carol_api.get(f"/api/v1/files/{file_id}/download/").status_code,
        carol_api.get(f"/api/v1/files/{attached['id']}/download/").status_code,
        carol_api.delete(f"/api/v1/files/{file_id}/").status_code,
        carol_api.get(kb).status_code,
        carol_api.patch(kb, {"name": "mine"}, format="json").status_code,
        carol_api.delete(kb).status_code,
        carol_api.get(f"{kb}documents/").status_code,
        add_document(carol_api, knowledge_base_id, "x.txt", b"hello").status_code,
        carol_api.delete(f"{kb}documents/{document['id']}/").status_code,
        carol_api.get(f"{kb}search/", {"q": "capybara"}).status_code,
        attach(carol_api, session_id, "x.txt", b"hello").status_code,
    ]
    listed = (
        carol_api.get("/api/v1/files/").json()["results"]
        + carol_api.get("/api/v1/knowledge-bases/").json()["results"]
    )

    assert answers == [404] * 12
    assert listed == []
    assert before == {
        "files": [field_values(f) for f in StoredFile.objects.order_by("pk")],
        "bases": [field_values(b) for b in KnowledgeBase.objects.order_by("pk")],
        "documents": KnowledgeDocument.objects.count(),
        "chunks": Chunk.objects.count(),
    }


@pytest.mark.django_db(transaction=True)  # the tool runs on a thread of its own, with its own connection
def test_another_tenant_cannot_attach_link_or_search_through_a_run(
    cast: Cast, alice_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent_a = make_agent(tenant=cast.tenant_a, model_provider="offline")
    knowledge_base_id = create_knowledge_base(alice_api, agent_ids=[str(agent_a.pk)])
    document = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages()).json()
    processed(document["file"]["id"])
    session_a = start_session(alice_api, agent_a.pk)
    attached = attach(alice_api, session_a, "dot.png", png_bytes(8, 8)).json()
    agent_b = make_agent(tenant=cast.tenant_b, model_provider="anthropic", model_name="test-model")
    session_b = start_session(carol_api, agent_b.pk)

    stolen = post(carol_api, session_b, "look", [attached["id"]])
    linked = carol_api.post(
        "/api/v1/knowledge-bases/", {"name": "B", "agent_ids": [str(agent_a.pk)]}, format="json"
    )
    own_base = create_knowledge_base(carol_api, name="B's", agent_ids=[str(agent_b.pk)])
    fake_model.script(
        Turn(tool_calls=[("file_search", {"query": "capybara hay"})]), Turn(text="Nothing found.")
    )
    run_id = post(carol_api, session_b, "How much hay?").json()["run"]["id"]
    execute_run(run_id)

    assert (stolen.status_code, stolen.json()["error"]["fields"]) == (
        400,
        {"attachments": [f"No file {attached['id']} was uploaded to this session."]},
    )
    assert (linked.status_code, linked.json()["error"]["fields"]) == (
        400,
        {"agent_ids": [f"No agent {agent_a.pk} in this team."]},
    )
    assert KnowledgeBase.objects.filter(tenant=cast.tenant_b).values_list("name", flat=True).get() == "B's"
    assert Step.objects.get(run_id=run_id, kind="tool_call").output["content"] == (
        "No passage matched 'capybara hay'. Try other words, or fewer of them."
    )
    assert not Citation.objects.filter(run_id=run_id).exists()
    assert own_base


# --- Bad input ----------------------------------------------------------------------------------


def test_refused_uploads_answer_4xx_and_store_nothing(
    cast: Cast, alice_api: APIClient, settings: Any, files_root: Path
) -> None:
    knowledge_base_id = create_knowledge_base(alice_api)
    settings.FILES_MAX_UPLOAD_BYTES = 100_000
    blobs_before = stored_blobs(files_root)

    executable = add_document(alice_api, knowledge_base_id, "report.pdf", elf_bytes())
    empty = add_document(alice_api, knowledge_base_id, "empty.txt", b"")
    too_large = add_document(alice_api, knowledge_base_id, "big.txt", b"a" * 100_001)
    image = add_document(alice_api, knowledge_base_id, "dot.png", png_bytes(8, 8))
    no_file = alice_api.post(
        f"/api/v1/knowledge-bases/{knowledge_base_id}/documents/", {}, format="multipart"
    )

    assert (executable.status_code, executable.json()["error"]["code"]) == (415, "unsupported_file_type")
    assert "executable" in executable.json()["error"]["message"]
    assert (empty.status_code, empty.json()["error"]["fields"]) == (400, {"file": ["The file is empty."]})
    assert (too_large.status_code, too_large.json()["error"]["code"]) == (413, "file_too_large")
    assert (image.status_code, image.json()["error"]["code"]) == (415, "unsupported_file_type")
    assert no_file.status_code == 400
    assert StoredFile.objects.count() == 0
    assert stored_blobs(files_root) == blobs_before


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("bomb.docx", zip_bomb_docx_bytes(), "zip bomb"),
        (
            "secret.pdf",
            encrypted_pdf_bytes("hidden"),
            "the PDF is encrypted: remove its password and upload it again",
        ),
    ],
)
def test_unreadable_documents_end_failed_with_their_reason(
    cast: Cast, alice_api: APIClient, name: str, data: bytes, reason: str
) -> None:
    knowledge_base_id = create_knowledge_base(alice_api)
    document = add_document(alice_api, knowledge_base_id, name, data)
    assert document.status_code == 201, document.content

    stored = processed(document.json()["file"]["id"])

    assert stored.status == "failed"
    assert reason in stored.status_reason
    assert Chunk.objects.filter(file=stored).count() == 0


def test_roles_decide_who_uploads_and_who_manages_knowledge(
    cast: Cast, alice_api: APIClient, bob_api: APIClient, victor_api: APIClient
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(alice_api, agent.pk)

    member_base = bob_api.post("/api/v1/knowledge-bases/", {"name": "Bob's"}, format="json")
    viewer_upload = attach(victor_api, session_id, "a.txt", b"hello")
    member_upload_to_alices_session = attach(bob_api, session_id, "a.txt", b"hello")

    assert member_base.status_code == 403
    assert viewer_upload.status_code == 403
    assert member_upload_to_alices_session.status_code == 403
    assert StoredFile.objects.count() == 0 and KnowledgeBase.objects.count() == 0


def test_deleting_a_file_its_session_or_its_knowledge_base_deletes_its_bytes(
    cast: Cast, alice_api: APIClient, files_root: Path, django_capture_on_commit_callbacks: Any
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(alice_api, agent.pk)
    first = attach(alice_api, session_id, "one.txt", b"first file").json()
    second = attach(alice_api, session_id, "two.txt", b"second file").json()
    knowledge_base_id = create_knowledge_base(alice_api)
    document = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages()).json()
    processed(document["file"]["id"])
    blobs = {row.pk: files_root / str(row.blob.name) for row in StoredFile.objects.all()}
    assert all(path.is_file() for path in blobs.values())

    with django_capture_on_commit_callbacks(execute=True):
        deleted_file = alice_api.delete(f"/api/v1/files/{first['id']}/")
    after_file = {str(pk) for pk, path in blobs.items() if path.exists()}
    with django_capture_on_commit_callbacks(execute=True):
        deleted_session = alice_api.delete(f"/api/v1/sessions/{session_id}/")
    with django_capture_on_commit_callbacks(execute=True):
        deleted_base = alice_api.delete(f"/api/v1/knowledge-bases/{knowledge_base_id}/")

    assert (deleted_file.status_code, deleted_session.status_code, deleted_base.status_code) == (
        204,
        204,
        204,
    )
    assert after_file == {second["id"], document["file"]["id"]}
    assert [path for path in blobs.values() if path.exists()] == []
    assert (StoredFile.objects.count(), Chunk.objects.count(), KnowledgeDocument.objects.count()) == (0, 0, 0)


def test_a_team_over_its_storage_limit_is_refused_and_nothing_is_stored(
    cast: Cast, alice_api: APIClient, settings: Any
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(alice_api, agent.pk)
    settings.FILES_MAX_TENANT_BYTES = 30
    first = attach(alice_api, session_id, "one.txt", b"twenty bytes of text")

    second = attach(alice_api, session_id, "two.txt", b"eleven byte")

    assert first.status_code == 201
    assert (second.status_code, second.json()["error"]["message"]) == (
        413,
        "This team's files would take 31 bytes; the limit is 30 bytes. Delete files to make room.",
    )
    assert list(StoredFile.objects.values_list("name", flat=True)) == ["one.txt"]


def test_a_message_cannot_carry_a_file_that_failed(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(alice_api, agent.pk)
    attached = attach(alice_api, session_id, "secret.pdf", encrypted_pdf_bytes("hidden")).json()
    processed(attached["id"])

    posted = post(alice_api, session_id, "Read this", [attached["id"]])

    assert (posted.status_code, posted.json()["error"]["fields"]) == (
        400,
        {"attachments": ["secret.pdf could not be read; remove it."]},
    )
    assert alice_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"] == []


def test_the_messages_list_reads_every_answers_citations_at_once(cast: Cast, alice_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    knowledge_base_id = create_knowledge_base(alice_api)
    document = add_document(alice_api, knowledge_base_id, "estate-handbook.pdf", twenty_pages()).json()
    chunk = Chunk.objects.filter(file_id=processed(document["file"]["id"]).pk, page=14).first()
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)

    def answer_citing(position: int) -> None:
        run = Run.objects.create(tenant=cast.tenant_a, session=session, agent=agent, status="completed")
        Citation.objects.create(tenant=cast.tenant_a, run=run, number=1, chunk=chunk)
        Message.objects.create(
            tenant=cast.tenant_a,
            session=session,
            parent_id=last_placed_message_id(session),
            run=run,
            position=position,
            role="assistant",
            content=[{"type": "text", "text": "See [1]."}],
        )

    def listed() -> tuple[int, list[Any]]:
        with CaptureQueriesContext(connection) as queries:
            results = alice_api.get(f"/api/v1/sessions/{session.pk}/messages/").json()["results"]
        return len(queries), [[c["page"] for c in message["citations"]] for message in results]

    answer_citing(1)
    one = listed()
    answer_citing(2)
    answer_citing(3)
    three = listed()

    assert one[1] == [[14]] and three[1] == [[14], [14], [14]]
    assert three[0] == one[0]
