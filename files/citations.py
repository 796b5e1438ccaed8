"""Sources a run's answer cites: the passages ``file_search`` returned, numbered per run.

``file_search`` numbers each passage it returns the first time the run sees it ([1], [2]…)
and asks the model to cite by number; an answer's citations are the numbered passages whose
marker appears in its text. A number never changes within a run, so an answer written after
several searches cites them all consistently.
"""

import re
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction
from django.db.models import Max

from files.models import Citation

MARKER = re.compile(r"\[(\d{1,4})\]")
NUMBERING_ATTEMPTS = 5


def citation_numbers(*, tenant_id: UUID, run_id: UUID, chunk_ids: list[int]) -> dict[int, int]:
    """Each chunk's number in the run, numbering the new ones after the run's highest.

    Two searches of one run may run at once (read-only tools run in parallel): a number
    taken by the other is retried.
    """
    for _ in range(NUMBERING_ATTEMPTS):
        try:
            with transaction.atomic():
                return _numbered(tenant_id=tenant_id, run_id=run_id, chunk_ids=chunk_ids)
        except IntegrityError:
            continue
    raise RuntimeError(f"could not number the citations of run {run_id}")


def _numbered(*, tenant_id: UUID, run_id: UUID, chunk_ids: list[int]) -> dict[int, int]:
    existing = dict(
        Citation.objects.filter(run_id=run_id, chunk_id__in=chunk_ids).values_list("chunk_id", "number")
    )
    new = [chunk_id for chunk_id in dict.fromkeys(chunk_ids) if chunk_id not in existing]
    if new:
        highest = Citation.objects.filter(run_id=run_id).aggregate(highest=Max("number"))["highest"] or 0
        Citation.objects.bulk_create(
            Citation(tenant_id=tenant_id, run_id=run_id, chunk_id=chunk_id, number=highest + offset)
            for offset, chunk_id in enumerate(new, start=1)
        )
        existing.update({chunk_id: highest + offset for offset, chunk_id in enumerate(new, start=1)})
    return existing


def cited_numbers(text: str) -> list[int]:
    return list(dict.fromkeys(int(number) for number in MARKER.findall(text)))


def citation_data(citation: Citation) -> dict[str, Any]:
    """A citation as the API, the events and the chat carry it."""
    chunk = citation.chunk
    return {
        "number": citation.number,
        "file_id": str(chunk.file_id),
        "document": chunk.file.name,
        "page": chunk.page,
        "heading": chunk.heading,
        "passage": chunk.text,
    }


def citations_for_text(*, run_id: UUID, text: str) -> list[dict[str, Any]]:
    """The run's passages the text cites, in number order; no query when it cites none."""
    numbers = cited_numbers(text)
    if not numbers:
        return []
    citations = Citation.objects.filter(run_id=run_id, number__in=numbers).select_related("chunk__file")
    return [citation_data(citation) for citation in citations.order_by("number")]


def with_citations(message_data: dict[str, Any], *, run_id: UUID) -> dict[str, Any]:
    """A ``message.completed`` event's data, with the passages its text cites (when it cites any)."""
    text = "".join(
        block.get("text", "") for block in message_data.get("content", ()) if block.get("type") == "text"
    )
    citations = citations_for_text(run_id=run_id, text=text)
    return {**message_data, "citations": citations} if citations else message_data


def citing_run_ids(messages: Iterable[Any]) -> set[UUID]:
    """The runs of the answers among ``messages`` that cite something."""
    return {
        message.run_id
        for message in messages
        if message.role == "assistant" and message.run_id is not None and MARKER.search(message.text)
    }


def citations_by_run(run_ids: Iterable[UUID]) -> dict[UUID, list[Citation]]:
    """Every citation of these runs, for a list of messages (one query; none for no runs)."""
    by_run: dict[UUID, list[Citation]] = {}
    run_ids = set(run_ids)
    if not run_ids:
        return by_run
    for citation in Citation.objects.filter(run_id__in=run_ids).select_related("chunk__file"):
        by_run.setdefault(citation.run_id, []).append(citation)
    return by_run


def cited_in(text: str, citations: list[Citation]) -> list[dict[str, Any]]:
    numbers = set(cited_numbers(text))
    return [citation_data(c) for c in sorted(citations, key=lambda c: c.number) if c.number in numbers]
