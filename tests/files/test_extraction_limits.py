"""A document's extraction budget: a 2,000-page PDF bomb fails at its CPU, wall-clock or
memory limit with a reason its uploader reads; a deleted file's extraction stops and stores
nothing; tenants take turns in the queue. Limits are small here so each test stays short."""

import io
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

import files.tasks
from files.extraction import extract_sections
from files.extraction_process import ExtractionLimits, extract_sections_within_limits
from files.models import Chunk, StoredFile
from files.tasks import process_file_task
from tests.conftest import Cast
from tests.factories import make_agent
from tests.files.documents import page_bomb_pdf_bytes, pdf_bytes
from tests.files.test_files_api import attach, start_session
from tests.live import wait_until

TOO_LARGE = "the document is too large to extract within the limits: reading it "
SPLIT_ADVICE = "; split it into smaller files and upload them again"
NOTE = b"The capybaras eat forty kilograms of hay each week.\n"


def attached_file(api: APIClient, tenant: Any, name: str, data: bytes) -> str:
    session_id = start_session(api, make_agent(tenant=tenant, model_provider="offline").pk)
    response = attach(api, session_id, name, data)
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def file_status(api: APIClient, file_id: str) -> tuple[str, str]:
    read = api.get(f"/api/v1/files/{file_id}/").json()
    return read["status"], read["status_reason"]


def child_process_ids() -> set[int]:
    """This process's children, from every thread (each thread's children are listed apart)."""
    tasks = Path(f"/proc/{os.getpid()}/task")
    return {int(pid) for task in tasks.iterdir() for pid in (task / "children").read_text().split()}


@pytest.mark.django_db
def test_a_2000_page_bomb_fails_at_its_cpu_budget_with_a_reason_its_uploader_reads(
    cast: Cast, bob_api: APIClient, settings: Any
) -> None:
    settings.FILES_EXTRACTION_CPU_SECONDS = 1
    settings.FILES_EXTRACTION_WALL_SECONDS = 60
    file_id = attached_file(bob_api, cast.tenant_a, "handbook.pdf", page_bomb_pdf_bytes(pages=2000))

    assert process_file_task(file_id) == "failed"

    assert file_status(bob_api, file_id) == (
        "failed",
        f"{TOO_LARGE}needed more than 1 second of processing{SPLIT_ADVICE}",
    )
    assert Chunk.objects.filter(file_id=file_id).count() == 0


@pytest.mark.django_db
def test_a_document_past_its_wall_clock_budget_fails_with_the_reason(
    cast: Cast, bob_api: APIClient, settings: Any
) -> None:
    # The bomb needs far more than a second of CPU, so the clock runs out before the CPU budget.
    settings.FILES_EXTRACTION_CPU_SECONDS = 60
    settings.FILES_EXTRACTION_WALL_SECONDS = 1
    file_id = attached_file(bob_api, cast.tenant_a, "handbook.pdf", page_bomb_pdf_bytes(pages=2000))

    assert process_file_task(file_id) == "failed"

    assert file_status(bob_api, file_id) == ("failed", f"{TOO_LARGE}took longer than 1 second{SPLIT_ADVICE}")


@pytest.mark.django_db
def test_a_document_past_its_memory_budget_fails_with_the_reason(
    cast: Cast, bob_api: APIClient, settings: Any
) -> None:
    settings.FILES_EXTRACTION_MEMORY_MB = 16
    file_id = attached_file(bob_api, cast.tenant_a, "notes.txt", NOTE * 30_000)

    assert process_file_task(file_id) == "failed"

    assert file_status(bob_api, file_id) == (
        "failed",
        f"{TOO_LARGE}needed more than 16 MB of memory{SPLIT_ADVICE}",
    )


@pytest.mark.django_db(transaction=True)
def test_deleting_a_file_kills_its_running_extraction_and_stores_nothing(
    cast: Cast, bob_api: APIClient, settings: Any
) -> None:
    settings.FILES_EXTRACTION_CPU_SECONDS = 60
    settings.FILES_EXTRACTION_WALL_SECONDS = 60
    file_id = attached_file(bob_api, cast.tenant_a, "handbook.pdf", page_bomb_pdf_bytes(pages=2000))
    outcome: dict[str, str] = {}

    def work() -> None:
        try:
            outcome["status"] = process_file_task(file_id)
        finally:
            connection.close()

    worker = threading.Thread(target=work)
    worker.start()
    children = wait_until(child_process_ids, timeout=20, message="the extraction's child process")
    deleted = bob_api.delete(f"/api/v1/files/{file_id}/")
    worker.join(timeout=20)

    assert deleted.status_code == 204
    assert not worker.is_alive()
    assert outcome == {"status": "deleted"}
    assert [pid for pid in children if Path(f"/proc/{pid}").exists()] == []
    assert (StoredFile.objects.filter(pk=file_id).count(), Chunk.objects.filter(file_id=file_id).count()) == (
        0,
        0,
    )


@pytest.mark.django_db
def test_a_file_deleted_once_its_text_is_read_gets_no_chunks(
    cast: Cast, bob_api: APIClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    file_id = attached_file(bob_api, cast.tenant_a, "notes.txt", NOTE)
    embed_chunks = files.tasks.embed_chunks

    def deleted_meanwhile(chunks: list[Chunk]) -> None:
        assert bob_api.delete(f"/api/v1/files/{file_id}/").status_code == 204
        embed_chunks(chunks)

    monkeypatch.setattr(files.tasks, "embed_chunks", deleted_meanwhile)

    assert process_file_task(file_id) == "deleted"
    assert (StoredFile.objects.filter(pk=file_id).count(), Chunk.objects.filter(file_id=file_id).count()) == (
        0,
        0,
    )


@pytest.mark.django_db
def test_a_tenant_that_queued_many_documents_takes_turns_with_another(
    cast: Cast, alice_api: APIClient, carol_api: APIClient
) -> None:
    alice_files = [
        attached_file(alice_api, cast.tenant_a, f"note-{number}.txt", NOTE) for number in (1, 2, 3)
    ]
    carol_file = attached_file(carol_api, cast.tenant_b, "carol.txt", NOTE)
    order = []

    # One task per file, taken in the order they were queued, as one cluster worker takes them.
    for token in [*alice_files, carol_file]:
        before = set(StoredFile.objects.filter(status="ready").values_list("id", flat=True))
        assert process_file_task(token) == "ready"
        (done,) = set(StoredFile.objects.filter(status="ready").values_list("id", flat=True)) - before
        order.append(str(done))

    assert order == [alice_files[0], carol_file, alice_files[2], alice_files[1]]


@pytest.mark.django_db
def test_a_task_whose_file_is_gone_takes_the_next_queued_one_or_nothing(
    cast: Cast, alice_api: APIClient
) -> None:
    kept = attached_file(alice_api, cast.tenant_a, "kept.txt", NOTE)
    gone = attached_file(alice_api, cast.tenant_a, "gone.txt", NOTE)
    assert alice_api.delete(f"/api/v1/files/{gone}/").status_code == 204

    assert process_file_task(gone) == "ready"
    assert process_file_task(kept) == "not queued"
    assert StoredFile.objects.get(pk=kept).status == "ready"


def test_the_child_reads_a_document_exactly_as_the_worker_itself_would() -> None:
    pdf = pdf_bytes(["Chapter one. Hay.", "", "Chapter three. Water."])
    limits = ExtractionLimits(cpu_seconds=30, memory_bytes=1024 * 1024 * 1024, wall_seconds=60)

    sections = extract_sections_within_limits(
        io.BytesIO(pdf), "application/pdf", limits=limits, is_wanted=lambda: True
    )

    assert sections == extract_sections(io.BytesIO(pdf), "application/pdf")
    assert [(section.page, section.text) for section in sections] == [
        (1, "Chapter one. Hay."),
        (3, "Chapter three. Water."),
    ]
