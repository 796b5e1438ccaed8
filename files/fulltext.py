"""Full-text search over chunks, one implementation per database.

The same structure as ``memory.fulltext``: PostgreSQL has a generated ``tsvector`` column
(english configuration) with a GIN index; SQLite an FTS5 table (porter stemmer) whose rowid
is the chunk's id, kept in sync by triggers, so every write path (ingestion, admin, bulk
inserts, raw SQL) keeps the index current. Query words come from ``memory.fulltext.query_terms``
(plain words, stop words dropped), so no user text ever reaches the query syntax.

Candidates are the chunks holding any of the query's rarer words, chosen as memories are
(``memory.fulltext.candidates_by_rarity``), ranked by BM25: FTS5's ``bm25()`` on SQLite; on
PostgreSQL, whose ``ts_rank`` knows no document frequencies, BM25 with one occurrence per term
and the idf from the scope's own counts.
"""

import json
import uuid
from typing import Any

from django.db import connection

from core.fulltext_index import FullTextIndex
from memory.fulltext import candidates_by_rarity, inverse_document_frequency, uuid_parameter

# A word held by this many of the scope's chunks is common: it only selects candidates when
# the query has no rarer word.
COMMON_TERM_DOCUMENTS = 500
# The most matches one query ranks (reached only when every word of the query is common).
MAX_RANKED_MATCHES = 3000

FULL_TEXT = FullTextIndex(table="files_chunk", column="text", key="id", prefix="files_chunk")


def text_candidates(
    *, tenant_id: uuid.UUID, file_ids: list[uuid.UUID], terms: list[str], limit: int
) -> list[tuple[int, float]]:
    """(chunk id, relevance > 0) of the best ``limit`` matches in ``file_ids``, best first, ties by id.

    Chunks are also filtered by tenant: the file list alone never decides what a tenant sees.
    """
    if not terms or not file_ids or limit <= 0:
        return []
    scope = _ChunkScope(tenant_id, file_ids)
    counts = _term_document_counts(scope, terms)

    def rank_matches(selecting: list[str], scoring: list[str], require_all: bool) -> list[tuple[int, float]]:
        return _ranked_matches(scope, selecting, scoring, counts, limit=limit, require_all=require_all)

    return candidates_by_rarity(
        terms, counts, common_documents=COMMON_TERM_DOCUMENTS, limit=limit, rank_matches=rank_matches
    )


class _ChunkScope:
    """The WHERE clause (over ``c``, the chunk) that every full-text query shares.

    The files come as one array parameter, not a subquery: PostgreSQL estimated a knowledge
    base's files at a few rows and probed the GIN index once per file, and a list of
    placeholders would meet SQLite's limit on parameters.
    """

    def __init__(self, tenant_id: uuid.UUID, file_ids: list[uuid.UUID]) -> None:
        file_id_values = [uuid_parameter(file_id) for file_id in file_ids]
        if connection.vendor == "sqlite":
            self.sql = "c.tenant_id = %s AND c.file_id IN (SELECT value FROM json_each(%s))"
            self.parameters = [uuid_parameter(tenant_id), json.dumps(file_id_values)]
        else:
            self.sql = "c.tenant_id = %s AND c.file_id = ANY(%s::uuid[])"
            self.parameters = [uuid_parameter(tenant_id), file_id_values]


def _term_query(term: str) -> str:
    return f'"{term}"' if connection.vendor == "sqlite" else term


def _term_document_counts(scope: _ChunkScope, terms: list[str]) -> dict[str, int]:
    """How many of the scope's chunks hold each term, counted up to ``COMMON_TERM_DOCUMENTS``.

    Capped counts cost little even for words in most chunks; one round trip for all terms.
    """
    if connection.vendor == "sqlite":
        count = (
            "(SELECT count(*) FROM (SELECT 1 FROM files_chunk_fts JOIN files_chunk AS c "  # noqa: S608
            f"ON c.id = files_chunk_fts.rowid WHERE files_chunk_fts MATCH %s AND {scope.sql} LIMIT %s))"
        )
    else:
        count = (
            "(SELECT count(*) FROM (SELECT 1 FROM files_chunk AS c "  # noqa: S608
            f"WHERE c.search_vector @@ to_tsquery('english'::regconfig, %s) AND {scope.sql} LIMIT %s) AS t)"
        )
    parameters: list[Any] = []
    for term in terms:
        parameters.extend([_term_query(term), *scope.parameters, COMMON_TERM_DOCUMENTS])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join([count] * len(terms))}", parameters)
        row = cursor.fetchone()
    return dict(zip(terms, (int(value) for value in row), strict=True))


def _ranked_matches(
    scope: _ChunkScope,
    selecting: list[str],
    scoring: list[str],
    counts: dict[str, int],
    *,
    limit: int,
    require_all: bool = False,
) -> list[tuple[int, float]]:
    """Chunks holding any (or all) of the ``selecting`` terms, ranked by all ``scoring`` terms."""
    if connection.vendor == "sqlite":
        inner, parameters = _sqlite_ranked(scope, selecting, scoring, require_all=require_all)
    else:
        inner, parameters = _postgres_ranked(scope, selecting, scoring, counts, require_all=require_all)
    sql = f"SELECT id, relevance FROM ({inner}) AS matches ORDER BY relevance DESC, id LIMIT %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(sql, [*parameters, limit])
        rows = cursor.fetchall()
    return [(int(chunk_id), float(relevance)) for chunk_id, relevance in rows if relevance > 0]


def _sqlite_ranked(
    scope: _ChunkScope, selecting: list[str], scoring: list[str], *, require_all: bool
) -> tuple[str, list[Any]]:
    # bm25 (FTS5's own statistics) sums over every phrase of the expression, so the common
    # terms score through the second, always-true group without selecting anything.
    match = (" AND " if require_all else " OR ").join(_term_query(term) for term in selecting)
    extra = [term for term in scoring if term not in selecting]
    if extra:
        match = f"({match}) AND ({' OR '.join(_term_query(term) for term in selecting + extra)})"
    inner = (
        "SELECT c.id AS id, -bm25(files_chunk_fts) AS relevance "  # noqa: S608
        "FROM files_chunk_fts JOIN files_chunk AS c ON c.id = files_chunk_fts.rowid "
        f"WHERE files_chunk_fts MATCH %s AND {scope.sql} LIMIT %s"
    )
    return inner, [match, *scope.parameters, MAX_RANKED_MATCHES]


def _postgres_ranked(
    scope: _ChunkScope, selecting: list[str], scoring: list[str], counts: dict[str, int], *, require_all: bool
) -> tuple[str, list[Any]]:
    weights = " + ".join(
        ["CASE WHEN c.search_vector @@ to_tsquery('english'::regconfig, %s) THEN %s ELSE 0 END"]
        * len(scoring)
    )
    # BM25's length normalization (k1 = 1.2, b = 0.75) against a typical chunk of 100 lexemes.
    length_norm = "2.2 / (1 + 1.2 * (0.25 + 0.75 * length(c.search_vector) / 100.0))"
    inner = (
        f"SELECT c.id AS id, ({weights}) * {length_norm} AS relevance FROM files_chunk AS c "  # noqa: S608
        f"WHERE c.search_vector @@ to_tsquery('english'::regconfig, %s) AND {scope.sql} LIMIT %s"
    )
    parameters: list[Any] = [
        value for term in scoring for value in (term, inverse_document_frequency(counts[term]))
    ]
    parameters += [(" & " if require_all else " | ").join(selecting), *scope.parameters, MAX_RANKED_MATCHES]
    return inner, parameters
