"""Extraction in the background: a queued document becomes searchable chunks, or fails with a reason.

Dispatch is at least once: a file is claimed with a conditional update (queued →
processing), so a repeated task does nothing. A worker that dies mid-file leaves it
``processing``; the schedule ``requeue_stale_files`` queues such files (and queued files
whose task was lost) again, and a file that keeps failing that way ends ``failed``.
"""

import logging
from datetime import timedelta
from typing import BinaryIO, cast
from uuid import UUID

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.tasks import enqueue_task
from files.chunking import ChunkText, chunk_sections
from files.extraction import ExtractionError, Section, extract_sections
from files.models import Chunk, FileStatus, StoredFile
from files.search import embed_chunks
from files.vectors import store_vectors

logger = logging.getLogger(__name__)

STALE_AFTER = timedelta(minutes=10)
# Where a page starts in an attachment's text, so the model can cite pages too.
PAGE_MARK = "[page {page}]"


class FileUnreadable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def queue_file_processing(file_id: UUID) -> None:
    enqueue_task(process_file_task, str(file_id), task_name=f"file-{file_id}")


def process_file_task(file_id: str) -> str:
    """Extract, chunk and index one file; returns its status."""
    if not _claim(UUID(file_id)):
        return "not queued"
    stored = StoredFile.objects.get(pk=file_id)
    try:
        sections, chunks = _read(stored)
    except FileUnreadable as error:
        _fail(stored, error.reason)
        return FileStatus.FAILED
    _store_chunks(stored, sections, chunks)
    return FileStatus.READY


def _claim(file_id: UUID) -> bool:
    return (
        StoredFile.objects.filter(pk=file_id, status=FileStatus.QUEUED).update(
            status=FileStatus.PROCESSING, processing_started_at=timezone.now()
        )
        == 1
    )


def _read(stored: StoredFile) -> tuple[list[Section], list[ChunkText]]:
    try:
        with stored.blob.open("rb") as fileobj:
            sections = extract_sections(cast(BinaryIO, fileobj), stored.content_type)
    except ExtractionError as error:
        raise FileUnreadable(error.reason) from error
    except FileNotFoundError as error:
        raise FileUnreadable("the file's bytes are missing from storage") from error
    except Exception as error:  # a library's own bug must not leave the file processing forever
        logger.exception("extracting file %s (%s) failed", stored.pk, stored.content_type)
        raise FileUnreadable(f"the file could not be read ({type(error).__name__})") from error
    chunks = chunk_sections(sections)
    if not chunks:
        raise FileUnreadable("no text was found in the file")
    return sections, chunks


def attachment_text(sections: list[Section]) -> str:
    """The sections as one text, each page (or heading) marked where it starts."""
    parts: list[str] = []
    last_page: int | None = None
    for section in sections:
        if section.page is not None and section.page != last_page:
            parts.append(PAGE_MARK.format(page=section.page))
            last_page = section.page
        parts.append(section.text.strip())
    return "\n\n".join(part for part in parts if part)


def _store_chunks(stored: StoredFile, sections: list[Section], texts: list[ChunkText]) -> None:
    chunks = [
        Chunk(
            tenant_id=stored.tenant_id,
            file=stored,
            ordinal=text.ordinal,
            text=text.text,
            page=text.page,
            heading=text.heading[:300],
        )
        for text in texts
    ]
    embed_chunks(chunks)  # before the transaction: an embeddings endpoint may be slow
    text = attachment_text(sections)
    pages = [section.page for section in sections if section.page is not None]
    with transaction.atomic():
        Chunk.objects.filter(file=stored).delete()  # a retry after a crash starts clean
        Chunk.objects.bulk_create(chunks, batch_size=500)
        store_vectors(chunks)
        StoredFile.objects.filter(pk=stored.pk).update(
            status=FileStatus.READY,
            status_reason="",
            text=text,
            character_count=len(text),
            chunk_count=len(chunks),
            page_count=max(pages) if pages else None,
            processed_at=timezone.now(),
        )


def _fail(stored: StoredFile, reason: str) -> None:
    StoredFile.objects.filter(pk=stored.pk).update(
        status=FileStatus.FAILED, status_reason=reason[:500], processed_at=timezone.now()
    )


def requeue_stale_files() -> int:
    """Queue again files whose task was lost or whose worker died; a second death fails the file."""
    cutoff = timezone.now() - STALE_AFTER
    lost = StoredFile.objects.filter(status=FileStatus.QUEUED, created_at__lt=cutoff).filter(
        Q(processing_started_at__isnull=True) | Q(processing_started_at__lt=cutoff)
    )
    died = StoredFile.objects.filter(status=FileStatus.PROCESSING, processing_started_at__lt=cutoff)
    requeued = 0
    for stored in died.only("id", "processing_started_at", "status_reason"):
        if stored.status_reason:  # already requeued once after a worker died on it
            _fail(stored, "processing the file stopped twice (is it too large for the worker?)")
            continue
        StoredFile.objects.filter(pk=stored.pk, status=FileStatus.PROCESSING).update(
            status=FileStatus.QUEUED, status_reason="requeued after its worker stopped"
        )
        queue_file_processing(stored.pk)
        requeued += 1
    for file_id in lost.values_list("id", flat=True):
        StoredFile.objects.filter(pk=file_id).update(processing_started_at=timezone.now())
        queue_file_processing(file_id)
        requeued += 1
    return requeued
