"""Chunk vectors in PostgreSQL with pgvector, when the extension is available.

``files_chunk.embedding_vector`` is a ``vector`` column without a fixed dimension (models
differ) holding the same values as ``embedding``'s float32 bytes. It is not a model field
(like the ``tsvector`` column of ``files.fulltext``), so ``makemigrations`` has nothing to
say about it, and SQLite or a PostgreSQL without pgvector runs with the same models.

It is written from Python after every write of ``embedding`` (``store_vectors``): decoding
float32 bytes in SQL (``get_byte`` and bit arithmetic, per value) is far too slow for a
trigger or a generated column. Searches rank by exact inner product in SQL
(``<#>``: on unit vectors it orders as cosine does, and as the Python scan of
``files.search`` does); no index is needed for an exact scan.

This is the one module that asks which database it runs on for vectors.
"""

import logging
from array import array
from collections.abc import Sequence
from typing import Literal
from uuid import UUID

from django.db import ProgrammingError, connection, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from files.models import Chunk
from memory.fulltext import uuid_parameter

logger = logging.getLogger(__name__)

VectorSearchPath = Literal["pgvector", "python-scan"]

BACKFILL_BATCH = 500
UNINSTALL = "ALTER TABLE files_chunk DROP COLUMN IF EXISTS embedding_vector"
INSTALL = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    "ALTER TABLE files_chunk ADD COLUMN IF NOT EXISTS embedding_vector vector",
    # pgvector's own default (external) moves a vector over ~2 KB (512 values) out of line,
    # and the exact scan then fetches every vector from TOAST; main keeps it in the row
    # unless the row would not fit a page (thousands of values), see docs/benchmarks.md.
    "ALTER TABLE files_chunk ALTER COLUMN embedding_vector SET STORAGE main",
]
# The CASE keeps ``<#>`` from ever seeing two dimensions (pgvector raises on that): a model
# configured for another dimension under the same name is simply not compared.
RANKED_SQL = """
    SELECT id FROM (
        SELECT c.id AS id,
               CASE WHEN vector_dims(c.embedding_vector) = %s THEN c.embedding_vector <#> %s::vector END
                   AS negative_similarity
        FROM files_chunk AS c
        WHERE c.tenant_id = %s AND c.file_id = ANY(%s::uuid[]) AND c.embedding_model = %s
          AND c.embedding_vector IS NOT NULL
    ) AS scored
    WHERE negative_similarity < %s
    ORDER BY negative_similarity, id
    LIMIT %s
"""

# (alias, database name) → whether ``embedding_vector`` exists; learnt once per process.
_column_presence: dict[tuple[str, str], bool] = {}


def vector_search_path() -> VectorSearchPath:
    """How ``files.search`` ranks by vectors on the default database; one query per process.

    A process started before ``manage.py knowledge_vectors`` installed the column keeps the
    Python scan until it restarts.
    """
    key = (connection.alias, str(connection.settings_dict["NAME"]))
    if key not in _column_presence:
        _column_presence[key] = _has_vector_column(connection)
    return "pgvector" if _column_presence[key] else "python-scan"


def install_vectors(database: BaseDatabaseWrapper) -> bool:
    """Create the extension and the column (idempotent; ``backfill_vectors`` fills it); False
    when pgvector is not available to this database (SQLite, not on the server, no privilege)."""
    if database.vendor != "postgresql" or not _is_extension_available(database):
        return False
    if _has_vector_column(database):
        # Even a no-op ALTER TABLE fails in a transaction with pending deferred constraints.
        return True
    try:
        with transaction.atomic(using=database.alias), database.cursor() as cursor:
            for statement in INSTALL:
                cursor.execute(statement)
    except ProgrammingError as error:
        # pgvector is not a trusted extension: only a superuser may create it.
        logger.warning(
            "pgvector is available but could not be enabled (%s); knowledge search keeps the "
            "Python scan. A superuser can run CREATE EXTENSION vector, then manage.py knowledge_vectors.",
            error,
        )
        return False
    _column_presence.pop((database.alias, str(database.settings_dict["NAME"])), None)
    return True


def uninstall_vectors(database: BaseDatabaseWrapper) -> None:
    """Drop the column (not the extension: other tables may use it)."""
    if database.vendor == "postgresql":
        with database.cursor() as cursor:
            cursor.execute(UNINSTALL)
    _column_presence.pop((database.alias, str(database.settings_dict["NAME"])), None)


def backfill_vectors(database: BaseDatabaseWrapper) -> int:
    """Copy every stored ``embedding`` still missing from ``embedding_vector``; the count copied.

    Raw SQL rather than the model: migrations call it with the schema of their own time.
    """
    copied = 0
    last_id = 0
    while True:
        with database.cursor() as cursor:
            cursor.execute(
                "SELECT id, embedding FROM files_chunk WHERE id > %s AND embedding IS NOT NULL "
                "AND embedding_vector IS NULL ORDER BY id LIMIT %s",
                [last_id, BACKFILL_BATCH],
            )
            rows = [(int(chunk_id), bytes(embedding)) for chunk_id, embedding in cursor.fetchall()]
        if not rows:
            return copied
        _write_vectors(database, rows)
        copied += len(rows)
        last_id = rows[-1][0]


def store_vectors(chunks: Sequence[Chunk]) -> None:
    """Copy the saved ``chunks``' embeddings into ``embedding_vector``, when that column exists.

    Every write of ``embedding`` calls this after it (ingestion, ``files.search.embed_chunks``).
    """
    if vector_search_path() != "pgvector":
        return
    rows = [
        (chunk.pk, bytes(chunk.embedding)) for chunk in chunks if chunk.pk is not None and chunk.embedding
    ]
    for start in range(0, len(rows), BACKFILL_BATCH):
        _write_vectors(connection, rows[start : start + BACKFILL_BATCH])


def ranked_by_similarity(
    *,
    tenant_id: UUID,
    file_ids: list[UUID],
    model: str,
    query_vector: list[float],
    minimum_similarity: float,
    limit: int,
) -> list[int]:
    """Ids of the best ``limit`` chunks of ``model`` in the files, by inner product with the
    query (unit vectors: cosine), above ``minimum_similarity``; best first, ties by id."""
    parameters = [
        len(query_vector),
        _vector_text(query_vector),
        uuid_parameter(tenant_id),
        [uuid_parameter(file_id) for file_id in file_ids],
        model,
        -minimum_similarity,
        limit,
    ]
    with connection.cursor() as cursor:
        cursor.execute(RANKED_SQL, parameters)
        return [int(chunk_id) for (chunk_id,) in cursor.fetchall()]


def _has_vector_column(database: BaseDatabaseWrapper) -> bool:
    if database.vendor != "postgresql":
        return False
    with database.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass('files_chunk') "
            "AND attname = 'embedding_vector' AND NOT attisdropped"
        )
        return cursor.fetchone() is not None


def _is_extension_available(database: BaseDatabaseWrapper) -> bool:
    with database.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        return cursor.fetchone() is not None


def _write_vectors(database: BaseDatabaseWrapper, rows: list[tuple[int, bytes]]) -> None:
    """One statement for a batch of (chunk id, float32 bytes); empty bytes stay NULL."""
    vectors = [(chunk_id, _vector_text(_floats(embedding))) for chunk_id, embedding in rows if embedding]
    if not vectors:
        return
    with database.cursor() as cursor:
        cursor.execute(
            "UPDATE files_chunk AS c SET embedding_vector = v.vector::vector "
            "FROM unnest(%s::bigint[], %s::text[]) AS v(id, vector) WHERE c.id = v.id",
            [[chunk_id for chunk_id, _ in vectors], [text for _, text in vectors]],
        )


def _floats(embedding: bytes) -> "array[float]":
    values = array("f")
    values.frombytes(embedding)
    return values


def _vector_text(values: Sequence[float]) -> str:
    # repr is the shortest text that reads back as the same double, so each float32 value
    # round-trips exactly through pgvector's parser.
    return "[" + ",".join(map(repr, values)) + "]"
