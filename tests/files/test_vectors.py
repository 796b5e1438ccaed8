"""Knowledge search with pgvector when the database has it, the Python scan otherwise."""

import hashlib
import io
from array import array
from typing import Any

import pytest
from django.core.files.base import ContentFile
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from files.models import Chunk, FileStatus, KnowledgeBase, StoredFile
from files.search import embed_chunks, search_passages
from files.tasks import process_file_task
from files.vectors import vector_search_path
from tests.conftest import Cast
from tests.files.test_search import add_chunks, kb_scope, make_file, make_knowledge_base

NO_PGVECTOR = "the database lacks pgvector (SQLite, or PostgreSQL without the vector extension)"
# Each chunk names a different share of the query's words, so the vector ranking is strict.
FLEET_CHUNKS = [
    "The turbine inspection schedule for the northern wind farm is every fourteen weeks.",
    "Turbine blades are inspected after storms.",
    "The wind farm office closes at five.",
    "Payroll closes on the twenty-fifth of each month.",
    "Inspection reports of the northern turbine are kept for ten years.",
]
QUERY = "northern turbine inspection schedule"


@pytest.fixture
def hashing_embeddings(settings: Any) -> None:
    settings.MEMORY_EMBEDDINGS_BACKEND = "test-hashing"


@pytest.fixture
def pgvector(db: None) -> None:
    if vector_search_path() != "pgvector":
        pytest.skip(NO_PGVECTOR)


@pytest.fixture
def fleet(cast: Cast, hashing_embeddings: None) -> tuple[KnowledgeBase, list[Chunk]]:
    stored_file = make_file(cast.tenant_a, "fleet.pdf")
    chunks = add_chunks(stored_file, FLEET_CHUNKS)
    embed_chunks(chunks)
    return make_knowledge_base(cast.tenant_a, "Fleet", [stored_file]), chunks


def stored_vector(chunk_id: int) -> list[float] | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT embedding_vector::text FROM files_chunk WHERE id = %s", [chunk_id])
        text = cursor.fetchone()[0]
    # pgvector prints the shortest text of each float32 value: read it back as float32.
    return None if text is None else list(array("f", [float(value) for value in text.strip("[]").split(",")]))


def float32_values(chunk: Chunk) -> list[float]:
    values = array("f")
    values.frombytes(bytes(Chunk.objects.get(pk=chunk.pk).embedding))
    return list(values)


@pytest.mark.usefixtures("pgvector")
def test_pgvector_ranks_in_sql_as_the_python_scan_does(
    fleet: tuple[KnowledgeBase, list[Chunk]], monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge_base, chunks = fleet
    with CaptureQueriesContext(connection) as queries:
        in_sql = search_passages(kb_scope(knowledge_base), QUERY)
    monkeypatch.setattr("files.search.vector_search_path", lambda: "python-scan")
    scanned = search_passages(kb_scope(knowledge_base), QUERY)

    assert any("<#>" in query["sql"] for query in queries.captured_queries)
    assert in_sql[0].chunk_id == chunks[0].pk
    assert [(passage.chunk_id, passage.score) for passage in in_sql] == [
        (passage.chunk_id, passage.score) for passage in scanned
    ]


@pytest.mark.usefixtures("pgvector")
def test_vectors_alone_rank_in_sql_as_the_python_scan_does(
    fleet: tuple[KnowledgeBase, list[Chunk]], monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge_base, chunks = fleet
    # No word of this query is in the chunks: only vectors (character n-grams) find them.
    in_sql = search_passages(kb_scope(knowledge_base), "turbines inspected", limit=5)
    monkeypatch.setattr("files.search.vector_search_path", lambda: "python-scan")
    scanned = search_passages(kb_scope(knowledge_base), "turbines inspected", limit=5)

    assert [passage.chunk_id for passage in in_sql] == [passage.chunk_id for passage in scanned]
    assert in_sql[0].chunk_id == chunks[1].pk


@pytest.mark.usefixtures("pgvector")
def test_embed_chunks_stores_the_same_values_as_a_vector(fleet: tuple[KnowledgeBase, list[Chunk]]) -> None:
    _, chunks = fleet

    assert stored_vector(chunks[0].pk) == float32_values(chunks[0])


@pytest.mark.usefixtures("pgvector", "hashing_embeddings")
def test_ingestion_stores_each_chunks_vector(cast: Cast) -> None:
    content = "\n\n".join(FLEET_CHUNKS).encode()
    stored_file = StoredFile.objects.create(
        tenant=cast.tenant_a,
        name="fleet.txt",
        content_type="text/plain",
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        blob=ContentFile(content, name="x"),
        status=FileStatus.QUEUED,
    )

    assert process_file_task(str(stored_file.pk)) == FileStatus.READY
    chunks = list(Chunk.objects.filter(file=stored_file))
    assert chunks
    assert all(stored_vector(chunk.pk) == float32_values(chunk) for chunk in chunks)


@pytest.mark.usefixtures("pgvector")
def test_knowledge_vectors_copies_embeddings_written_before_the_column(
    fleet: tuple[KnowledgeBase, list[Chunk]],
) -> None:
    _, chunks = fleet
    with connection.cursor() as cursor:
        cursor.execute("UPDATE files_chunk SET embedding_vector = NULL")

    call_command("knowledge_vectors", stdout=io.StringIO())

    assert [stored_vector(chunk.pk) for chunk in chunks] == [float32_values(chunk) for chunk in chunks]


@pytest.mark.usefixtures("pgvector")
def test_a_vector_of_another_dimension_is_not_compared(
    fleet: tuple[KnowledgeBase, list[Chunk]], cast: Cast
) -> None:
    knowledge_base, chunks = fleet
    odd = add_chunks(make_file(cast.tenant_a, "odd.pdf"), ["Quarterly figures."])[0]
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE files_chunk SET embedding_vector = '[1,0,0]', embedding_model = 'test-hashing' "
            "WHERE id = %s",
            [odd.pk],
        )
    knowledge_base.documents.create(tenant=cast.tenant_a, file=odd.file)

    passages = search_passages(kb_scope(knowledge_base), "turbines inspected", limit=10)

    assert odd.pk not in [passage.chunk_id for passage in passages]
    assert passages[0].chunk_id == chunks[1].pk


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite never has pgvector")
def test_sqlite_ranks_by_the_python_scan_and_the_command_says_why(db: None) -> None:
    assert vector_search_path() == "python-scan"
    with pytest.raises(CommandError, match="pgvector is not available"):
        call_command("knowledge_vectors")


@pytest.mark.usefixtures("pgvector")
def test_vectors_stay_in_the_row_so_the_scan_reads_no_toast() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attstorage FROM pg_attribute "
            "WHERE attrelid = 'files_chunk'::regclass AND attname = 'embedding_vector'"
        )
        assert cursor.fetchone() == ("m",)
