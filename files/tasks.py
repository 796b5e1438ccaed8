"""Extraction in the background: a queued document becomes searchable chunks, or fails with a reason.

Each queued file has one task, and each task extracts one queued file: its own, unless
another tenant has waited longer. The tenant whose last extraction started longest ago (or
never) goes first, so a tenant who queues many heavy documents takes turns with the others
instead of holding the queue; a document's own budget (``files.extraction_process``)
bounds how long a turn lasts. A file is claimed with a conditional update (queued →
processing), so two workers never take the same file, and a task that finds nothing queued
does nothing.

A file deleted while it is extracted stops its child process within a poll, and a file
deleted just after is never given chunks (its row is locked while they are written).

A worker that dies mid-file leaves it ``processing``; the schedule ``requeue_stale_files``
queues such files (and queued files whose task was lost) again, and a file that keeps
failing that way ends ``failed``.
"""

import logging
from datetime import timedelta
from typing import BinaryIO, cast
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import F, OuterRef, Q, Subquery
from django.utils import timezone

from core.tasks import enqueue_task
from files.chunking import ChunkText, chunk_sections
from files.extraction import ExtractionError, Section
from files.extraction_process import ExtractionAbandoned, ExtractionLimits, extract_sections_within_limits
from files.models import Chunk, FileStatus, StoredFile
from files.search import embed_chunks
from files.vectors import store_vectors

logger = logging.getLogger(__name__)

STALE_AFTER = timedelta(minutes=10)
# A claim that loses its file to another worker looks again, this many times at most.
CLAIM_ATTEMPTS = 5
# Where a page starts in an attachment's text, so the model can cite pages too.
PAGE_MARK = "[page {page}]"


class FileUnreadable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def queue_file_processing(file_id: UUID) -> None:
    enqueue_task(process_file_task, str(file_id), task_name=f"file-{file_id}")


def process_file_task(file_id: str) -> str:
    """Extract, chunk and index one queued file (``file_id``'s, unless another tenant's turn
    comes first); returns its status."""
    stored = _claim_next(preferred_id=UUID(file_id))
    if stored is None:
        return "not queued"
    try:
        sections, chunks = _read(stored)
    except ExtractionAbandoned:
        return "deleted"
    except FileUnreadable as error:
        _fail(stored, error.reason)
        return FileStatus.FAILED
    if not _store_chunks(stored, sections, chunks):
        return "deleted"
    return FileStatus.READY


def _claim_next(*, preferred_id: UUID) -> StoredFile | None:
    """The next file in fair order, claimed (queued → processing); None when none is queued."""
    for _ in range(CLAIM_ATTEMPTS):
        file_id = _next_in_turn(preferred_id=preferred_id)
        if file_id is None:
            return None
        claimed = StoredFile.objects.filter(pk=file_id, status=FileStatus.QUEUED).update(
            status=FileStatus.PROCESSING, processing_started_at=timezone.now()
        )
        if claimed == 1:
            return StoredFile.objects.get(pk=file_id)
    return None  # other workers keep taking the files first: theirs are being extracted


def _next_in_turn(*, preferred_id: UUID) -> UUID | None:
    """A queued file of the tenant served longest ago: ``preferred_id`` if it is one of its own."""
    tenant_last_started = (
        StoredFile.objects.filter(tenant_id=OuterRef("tenant_id"), processing_started_at__isnull=False)
        .order_by("-processing_started_at")
        .values("processing_started_at")[:1]
    )
    first = (
        StoredFile.objects.filter(status=FileStatus.QUEUED)
        .annotate(tenant_last_started=Subquery(tenant_last_started))
        .order_by(F("tenant_last_started").asc(nulls_first=True), "created_at", "id")
        .values_list("id", "tenant_id")
        .first()
    )
    if first is None:
        return None
    file_id, tenant_id = first
    is_preferred_in_turn = StoredFile.objects.filter(
        pk=preferred_id, tenant_id=tenant_id, status=FileStatus.QUEUED
    ).exists()
    return preferred_id if is_preferred_in_turn else file_id


def _read(stored: StoredFile) -> tuple[list[Section], list[ChunkText]]:
    if not _exists(stored.pk):
        raise ExtractionAbandoned()
    try:
        with stored.blob.open("rb") as fileobj:
            sections = extract_sections_within_limits(
                cast(BinaryIO, fileobj),
                stored.content_type,
                limits=extraction_limits(),
                is_wanted=lambda: _exists(stored.pk),
            )
    except ExtractionError as error:
        raise FileUnreadable(error.reason) from error
    except FileNotFoundError as error:
        raise FileUnreadable("the file's bytes are missing from storage") from error
    except OSError as error:  # storage or the system refused: the file must not stay processing
        logger.exception("extracting file %s (%s) failed", stored.pk, stored.content_type)
        raise FileUnreadable(f"the file could not be read ({type(error).__name__})") from error
    chunks = chunk_sections(sections)
    if not chunks:
        raise FileUnreadable("no text was found in the file")
    return sections, chunks


def extraction_limits() -> ExtractionLimits:
    return ExtractionLimits(
        cpu_seconds=settings.FILES_EXTRACTION_CPU_SECONDS,
        memory_bytes=settings.FILES_EXTRACTION_MEMORY_MB * 1024 * 1024,
        wall_seconds=settings.FILES_EXTRACTION_WALL_SECONDS,
    )


def _exists(file_id: UUID) -> bool:
    return StoredFile.objects.filter(pk=file_id).exists()


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


def _store_chunks(stored: StoredFile, sections: list[Section], texts: list[ChunkText]) -> bool:
    """Store the file's chunks and text; False, storing nothing, when the file was deleted meanwhile."""
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
        # Locked until the commit: a delete either went first (nothing to store) or waits
        # and then deletes these chunks with the file.
        if not _locked_if_exists(stored.pk):
            return False
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
    return True


def _locked_if_exists(file_id: UUID) -> bool:
    locked = StoredFile.objects.select_for_update().filter(pk=file_id).values_list("id", flat=True)
    return locked.first() is not None


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
