"""Knowledge search: the passages of a tenant's ready files that best answer a query.

Hybrid ranking by Reciprocal Rank Fusion (RRF):

* full text (``files.fulltext``): the chunks holding the query's rarer words, ranked by BM25;
* vectors, when an embedding backend is configured (the platform's one, ``MEMORY_EMBEDDINGS_*``):
  the query is embedded once and compared (cosine, the vectors are unit length) with the
  stored vectors: all of the scope's in SQL with pgvector when the database has it
  (``files.vectors``), else the scope's most recent ``KNOWLEDGE_VECTOR_SCAN_LIMIT`` chunks plus
  the full-text candidates, an exact scan in Python; chunks of another backend or model are
  never compared, and similarities at or below ``VECTOR_MIN_SIMILARITY`` are not candidates;
* a chunk's score is ``sum(1 / (RRF_K + rank))`` over the rankings it appears in (rank 1 the
  best), with ``RRF_K = 60``. Ranks, not raw scores, are fused, so BM25 and cosine need no
  common scale. Equal scores are ordered by chunk id (the earlier chunk first).

With no backend, or when it fails, the full-text ranking alone answers. Only chunks of the
scope's tenant are ever read, and only of its ready files that are documents of its knowledge
bases or among its files (``SearchScope``).
"""

import logging
import operator
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from uuid import UUID

from django.db.models import Q, QuerySet

from files.conf import knowledge_setting
from files.fulltext import text_candidates
from files.models import Chunk, FileStatus, StoredFile
from files.vectors import ranked_by_similarity, store_vectors, vector_search_path
from memory.embeddings import EmbeddingBackend, embed_or_none, embedding_backend
from memory.fulltext import query_terms

logger = logging.getLogger(__name__)

RRF_K = 60
MIN_CANDIDATES = 50
MAX_CANDIDATES = 500
# A query vector of nothing but stop words is all zeros: nothing is similar to it.
VECTOR_MIN_SIMILARITY = 0.0


@dataclass(frozen=True)
class SearchScope:
    """The chunks a search may read: ``tenant_id``'s ready files that are documents of one of
    ``knowledge_base_ids`` or one of ``file_ids``."""

    tenant_id: UUID
    knowledge_base_ids: tuple[UUID, ...] = ()
    file_ids: tuple[UUID, ...] = ()

    def is_empty(self) -> bool:
        return not self.knowledge_base_ids and not self.file_ids

    def files(self) -> QuerySet[StoredFile]:
        chosen = Q()
        if self.file_ids:
            chosen |= Q(pk__in=self.file_ids)
        if self.knowledge_base_ids:
            chosen |= Q(
                knowledge_document__knowledge_base_id__in=self.knowledge_base_ids,
                knowledge_document__tenant_id=self.tenant_id,
            )
        return StoredFile.objects.filter(chosen, tenant_id=self.tenant_id, status=FileStatus.READY).order_by()


@dataclass(frozen=True)
class Passage:
    chunk_id: int
    file_id: UUID
    document: str
    page: int | None
    heading: str
    text: str
    score: float


def search_passages(scope: SearchScope, query: str, *, limit: int = 5) -> list[Passage]:
    """The best ``limit`` passages in ``scope`` for ``query``, best first (see the module docstring)."""
    if limit <= 0 or scope.is_empty():
        return []
    file_ids = list(scope.files().values_list("pk", flat=True))
    if not file_ids:
        return []
    pool = min(max(limit * 10, MIN_CANDIDATES), MAX_CANDIDATES)
    text_ranking = [
        chunk_id
        for chunk_id, _ in text_candidates(
            tenant_id=scope.tenant_id,
            file_ids=file_ids,
            terms=query_terms(query),
            limit=pool,
        )
    ]
    vector_ranking = _vector_ranking(scope, file_ids, query=query, text_ranking=text_ranking, pool=pool)
    fused = reciprocal_rank_fusion([text_ranking, vector_ranking])[:limit]
    return _passages(scope, file_ids, fused)


def reciprocal_rank_fusion(rankings: Sequence[Sequence[int]], *, k: int = RRF_K) -> list[tuple[int, float]]:
    """(chunk id, fused score) best first; equal scores by chunk id."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, chunk_id in enumerate(ranking, start=1):
            scores[chunk_id] = scores.get(chunk_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))


def embed_chunks(chunks: list[Chunk]) -> None:
    """Fill ``embedding`` and ``embedding_model`` of ``chunks`` with the configured backend.

    Saved chunks are updated in bulk; unsaved ones are filled for the caller's insert, which
    then calls ``files.vectors.store_vectors``.
    No backend, or a failing one (logged), leaves them empty: full text still finds them.
    """
    backend = embedding_backend()
    if backend is None or not chunks:
        return
    vectors = embed_or_none(backend, [chunk.text for chunk in chunks])
    if vectors is None:
        return
    for chunk, vector in zip(chunks, vectors, strict=True):
        chunk.embedding = array("f", vector).tobytes()
        chunk.embedding_model = backend.name
    saved = [chunk for chunk in chunks if chunk.pk is not None]
    if saved:
        Chunk.objects.bulk_update(saved, ["embedding", "embedding_model"])
        store_vectors(saved)


def _vector_ranking(
    scope: SearchScope, file_ids: list[UUID], *, query: str, text_ranking: list[int], pool: int
) -> list[int]:
    """Chunk ids by cosine similarity with the query, best first (ties by id); [] without vectors."""
    backend = embedding_backend()
    if backend is None or not query.strip():
        return []
    vectors = embed_or_none(backend, [query])
    if vectors is None:
        return []
    if vector_search_path() == "pgvector":
        return ranked_by_similarity(
            tenant_id=scope.tenant_id,
            file_ids=file_ids,
            model=backend.name,
            query_vector=vectors[0],
            minimum_similarity=VECTOR_MIN_SIMILARITY,
            limit=pool,
        )
    return _scanned_ranking(
        scope, file_ids, backend, query_vector=vectors[0], text_ranking=text_ranking, pool=pool
    )


def _scanned_ranking(
    scope: SearchScope,
    file_ids: list[UUID],
    backend: EmbeddingBackend,
    *,
    query_vector: list[float],
    text_ranking: list[int],
    pool: int,
) -> list[int]:
    """The exact scan in Python, for databases without pgvector."""
    query_values = array("f", query_vector)
    similarities = {
        chunk_id: _similarity(query_values, embedding)
        for chunk_id, embedding in _stored_vectors(scope, file_ids, backend, text_ranking)
    }
    ranked = sorted(
        (chunk_id for chunk_id, similarity in similarities.items() if similarity > VECTOR_MIN_SIMILARITY),
        key=lambda chunk_id: (-similarities[chunk_id], chunk_id),
    )
    return ranked[:pool]


def _stored_vectors(
    scope: SearchScope, file_ids: list[UUID], backend: EmbeddingBackend, text_ranking: list[int]
) -> list[tuple[int, bytes]]:
    """The scope's most recent embedded chunks, bounded by the scan limit, plus the text hits."""
    embedded = Chunk.objects.filter(
        tenant_id=scope.tenant_id, file_id__in=file_ids, embedding_model=backend.name, embedding__isnull=False
    )
    scan_limit = int(knowledge_setting("KNOWLEDGE_VECTOR_SCAN_LIMIT"))
    # The most recent ids are chosen in a subquery, so the database sorts ids, not vectors.
    recent_ids = embedded.order_by("-id").values("id")[:scan_limit]
    rows = list(embedded.filter(pk__in=recent_ids).order_by().values_list("id", "embedding"))
    seen = {chunk_id for chunk_id, _ in rows}
    missing = [chunk_id for chunk_id in text_ranking if chunk_id not in seen]
    if missing:
        rows.extend(embedded.filter(pk__in=missing).order_by().values_list("id", "embedding"))
    return [(chunk_id, bytes(embedding)) for chunk_id, embedding in rows if embedding is not None]


def _similarity(query_vector: "array[float]", embedding: bytes) -> float:
    """The dot product of unit vectors; 0 for a vector of another dimension.

    float32 bytes and ``sum(map(mul))`` rather than ``memory.embeddings.dot`` over JSON lists:
    the scan reads thousands of vectors per query.
    """
    stored = array("f")
    stored.frombytes(embedding)
    if len(stored) != len(query_vector):
        return 0.0
    return float(sum(map(operator.mul, query_vector, stored)))


def _passages(scope: SearchScope, file_ids: list[UUID], fused: list[tuple[int, float]]) -> list[Passage]:
    # The scope is applied again: what reaches the caller never depends on the raw SQL alone.
    chunks = (
        Chunk.objects.filter(
            pk__in=[chunk_id for chunk_id, _ in fused], tenant_id=scope.tenant_id, file_id__in=file_ids
        )
        .select_related("file")
        .only("id", "file_id", "file__name", "page", "heading", "text")
    )
    by_id = {chunk.pk: chunk for chunk in chunks}
    return [
        Passage(
            chunk_id=chunk_id,
            file_id=by_id[chunk_id].file_id,
            document=by_id[chunk_id].file.name,
            page=by_id[chunk_id].page,
            heading=by_id[chunk_id].heading,
            text=by_id[chunk_id].text,
            score=score,
        )
        for chunk_id, score in fused
        if chunk_id in by_id
    ]
