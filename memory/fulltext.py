"""Full-text search over memories, one implementation per database.

The index (``FULL_TEXT``, see ``core.fulltext_index``): PostgreSQL's generated ``tsvector``
column with a GIN index, or SQLite's FTS5 table whose rowid is the memory's ``search_rowid``.
Ranked with BM25: FTS5's ``bm25`` on SQLite, an approximation from the scope's counts on
PostgreSQL.

Queries are reduced to plain words joined by OR, so a memory that shares some of the
query's words still counts, and no user text ever reaches the query syntax.
"""

import functools
import math
import operator
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection, models

from core.fulltext_index import FullTextIndex

MAX_QUERY_TERMS = 32
# A word held by this many of the agent's memories is common: it only selects candidates
# when the query has no rarer word.
COMMON_TERM_DOCUMENTS = 200
# The most matches one query ranks (reached only when every word of the query is common).
MAX_RANKED_MATCHES = 3000
IDF_REFERENCE_DOCUMENTS = 10_000
WORD = re.compile(r"[^\W_]+")
# Words that carry no topic. PostgreSQL's english configuration drops most of these itself;
# SQLite would match (and rank) every memory containing "the".
STOP_WORD_TEXT = """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves tell know remember please does
    """
STOP_WORDS = frozenset(STOP_WORD_TEXT.split())
# What a full-text index returns for a document: a memory's UUID, a chunk's integer id.
Key = TypeVar("Key")

FULL_TEXT = FullTextIndex(table="memory_memory", column="content", key="search_rowid", prefix="memory")


def query_terms(text: str) -> list[str]:
    """The distinct topic words of ``text``, in order, at most ``MAX_QUERY_TERMS``."""
    terms: list[str] = []
    for word in WORD.findall(text.lower()):
        if len(word) < 2 or word in STOP_WORDS or word in terms:
            continue
        terms.append(word)
        if len(terms) == MAX_QUERY_TERMS:
            break
    return terms


def word_set(text: str) -> frozenset[str]:
    """All words of ``text``, for near-duplicate checks."""
    return frozenset(WORD.findall(text.lower()))


@dataclass(frozen=True)
class MemoryScope:
    """Which memories a search may see: one tenant's agent, some statuses, and whose memories.

    By default general memories plus those about ``subject_user_id`` (when given);
    ``include_general=False`` keeps only that user's, ``all_subjects`` everyone's (for
    people managing the agent's memories, never for a run).
    """

    tenant_id: uuid.UUID
    agent_id: uuid.UUID
    statuses: tuple[str, ...]
    subject_user_id: int | None = None
    include_general: bool = True
    all_subjects: bool = False
    types: tuple[str, ...] = ()

    def condition(self) -> models.Q:
        condition = models.Q(tenant_id=self.tenant_id, agent_id=self.agent_id, status__in=self.statuses)
        if self.types:
            condition &= models.Q(type__in=self.types)
        if not self.all_subjects:
            subjects = []
            if self.include_general:
                subjects.append(models.Q(subject_user__isnull=True))
            if self.subject_user_id is not None:
                subjects.append(models.Q(subject_user_id=self.subject_user_id))
            if not subjects:
                return models.Q(pk__in=[])
            condition &= functools.reduce(operator.or_, subjects)
        return condition


def uuid_parameter(value: uuid.UUID) -> Any:
    return models.UUIDField().get_db_prep_value(value, connection, prepared=False)


def _scope_sql(scope: MemoryScope) -> tuple[str, list[Any]]:
    clauses = ["m.tenant_id = %s", "m.agent_id = %s"]
    parameters: list[Any] = [uuid_parameter(scope.tenant_id), uuid_parameter(scope.agent_id)]
    clauses.append(f"m.status IN ({', '.join(['%s'] * len(scope.statuses))})")
    parameters.extend(scope.statuses)
    if scope.types:
        clauses.append(f"m.type IN ({', '.join(['%s'] * len(scope.types))})")
        parameters.extend(scope.types)
    if not scope.all_subjects:
        subjects = ["m.subject_user_id IS NULL"] if scope.include_general else []
        if scope.subject_user_id is not None:
            subjects.append("m.subject_user_id = %s")
            parameters.append(scope.subject_user_id)
        clauses.append(f"({' OR '.join(subjects)})" if subjects else "1 = 0")
    return " AND ".join(clauses), parameters


def term_document_counts(scope: MemoryScope, terms: list[str]) -> dict[str, int]:
    """How many of the scope's memories hold each term, counted up to ``COMMON_TERM_DOCUMENTS``.

    Capped counts cost little even for words in most memories; one round trip for all terms.
    Scoped to the agent: other tenants' memories never weigh on this tenant's ranking.
    """
    where, scope_parameters = _scope_sql(scope)
    if connection.vendor == "sqlite":
        count = (
            "(SELECT count(*) FROM (SELECT 1 FROM memory_fts JOIN memory_memory AS m "  # noqa: S608
            f"ON m.search_rowid = memory_fts.rowid WHERE memory_fts MATCH %s AND {where} LIMIT %s))"
        )
    else:
        count = (
            "(SELECT count(*) FROM (SELECT 1 FROM memory_memory AS m "  # noqa: S608
            f"WHERE m.search_vector @@ to_tsquery('english'::regconfig, %s) AND {where} LIMIT %s) AS t)"
        )
    parameters: list[Any] = []
    for term in terms:
        parameters.extend([_term_query(term), *scope_parameters, COMMON_TERM_DOCUMENTS])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {', '.join([count] * len(terms))}", parameters)
        row = cursor.fetchone()
    return dict(zip(terms, (int(value) for value in row), strict=True))


def text_candidates(
    *, scope: MemoryScope, terms: list[str], limit: int, importance_floor: float
) -> list[tuple[uuid.UUID, float]]:
    """(memory id, relevance > 0) of the best matches, ordered by relevance * importance weight.

    Candidates are the memories holding any of the query's rarer words (``candidates_by_rarity``).
    """
    if not terms or not scope.statuses:
        return []
    counts = term_document_counts(scope, terms)

    def rank_matches(
        selecting: list[str], scoring: list[str], require_all: bool
    ) -> list[tuple[uuid.UUID, float]]:
        return _ranked_matches(
            scope, selecting, scoring, counts, limit=limit, floor=importance_floor, require_all=require_all
        )

    return candidates_by_rarity(
        terms, counts, common_documents=COMMON_TERM_DOCUMENTS, limit=limit, rank_matches=rank_matches
    )


def candidates_by_rarity(
    terms: list[str],
    counts: dict[str, int],
    *,
    common_documents: int,
    limit: int,
    rank_matches: Callable[[list[str], list[str], bool], list[tuple[Key, float]]],
) -> list[tuple[Key, float]]:
    """The best ``limit`` documents holding the query's rarer words, ranked by all its words.

    A word in ``common_documents`` or more documents tells little about which one is meant, and
    ranking every document that holds it would make latency grow with the collection. When every
    word is that common, documents holding all of them come first, then a bounded sample of
    those holding any. ``rank_matches(selecting, scoring, require_all)`` ranks the documents
    holding any (or all) of ``selecting`` by every ``scoring`` word; shared by the memory and
    knowledge indexes.
    """
    present = [term for term in terms if counts[term] > 0]
    rare = [term for term in present if counts[term] < common_documents]
    if rare:
        return rank_matches(rare, present, False)
    hits: list[tuple[Key, float]] = []
    if len(present) > 1:
        hits = rank_matches(present, present, True)
    if len(hits) < limit and present:
        seen = {key for key, _ in hits}
        more = rank_matches(present, present, False)
        hits += [hit for hit in more if hit[0] not in seen][: limit - len(hits)]
    return hits


def _term_query(term: str) -> str:
    return f'"{term}"' if connection.vendor == "sqlite" else term


def inverse_document_frequency(document_count: int) -> float:
    """BM25's idf against a reference collection size (counts are capped, so the size is too)."""
    return math.log(1 + (IDF_REFERENCE_DOCUMENTS - document_count + 0.5) / (document_count + 0.5))


def _ranked_matches(
    scope: MemoryScope,
    selecting: list[str],
    scoring: list[str],
    counts: dict[str, int],
    *,
    limit: int,
    floor: float,
    require_all: bool = False,
) -> list[tuple[uuid.UUID, float]]:
    """Memories holding any (or all) of the ``selecting`` terms, ranked by all ``scoring`` terms."""
    where, scope_parameters = _scope_sql(scope)
    if connection.vendor == "sqlite":
        # bm25 (FTS5's own statistics) sums over every phrase of the expression, so the common
        # terms score through the second, always-true group without selecting anything.
        inner = (
            "SELECT m.id AS id, m.importance AS importance, -bm25(memory_fts) AS relevance "  # noqa: S608
            "FROM memory_fts JOIN memory_memory AS m ON m.search_rowid = memory_fts.rowid "
            f"WHERE memory_fts MATCH %s AND {where} LIMIT %s"
        )
        match = (" AND " if require_all else " OR ").join(_term_query(term) for term in selecting)
        extra = [term for term in scoring if term not in selecting]
        if extra:
            match = f"({match}) AND ({' OR '.join(_term_query(term) for term in selecting + extra)})"
        inner_parameters: list[Any] = [match, *scope_parameters, MAX_RANKED_MATCHES]
    else:
        # ts_rank knows no document frequencies: BM25 with one occurrence per term instead,
        # its idf from the scoped counts.
        weights = " + ".join(
            ["CASE WHEN m.search_vector @@ to_tsquery('english'::regconfig, %s) THEN %s ELSE 0 END"]
            * len(scoring)
        )
        length_norm = "2.2 / (1 + 1.2 * (0.25 + 0.75 * length(m.search_vector) / 8.0))"
        inner = (
            f"SELECT m.id AS id, m.importance AS importance, ({weights}) * {length_norm} AS relevance "  # noqa: S608
            "FROM memory_memory AS m "
            f"WHERE m.search_vector @@ to_tsquery('english'::regconfig, %s) AND {where} LIMIT %s"
        )
        inner_parameters = [
            value for term in scoring for value in (term, inverse_document_frequency(counts[term]))
        ]
        inner_parameters += [
            (" & " if require_all else " | ").join(selecting),
            *scope_parameters,
            MAX_RANKED_MATCHES,
        ]
    sql = (
        f"SELECT id, relevance FROM ({inner}) AS matches "  # noqa: S608
        "ORDER BY relevance * (%s + %s * importance) DESC, id LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [*inner_parameters, floor, 1.0 - floor, limit])
        rows = cursor.fetchall()
    return [(uuid.UUID(str(memory_id)), float(relevance)) for memory_id, relevance in rows if relevance > 0]
