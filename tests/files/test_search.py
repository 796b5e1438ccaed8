"""Knowledge search: full text, vectors, their fusion, and what a scope lets a search read."""

import hashlib
from typing import Any

import pytest
from django.core.files.base import ContentFile

from files.models import Chunk, FilePurpose, FileStatus, KnowledgeBase, KnowledgeDocument, StoredFile
from files.search import Passage, SearchScope, embed_chunks, reciprocal_rank_fusion, search_passages
from memory.embeddings import EmbeddingError
from tenants.models import Tenant
from tests.conftest import Cast

HANDBOOK_PAGES = [
    "Welcome to the employee handbook. This guide covers benefits, holidays and the office.",
    "Expense reimbursement: submit receipts within thirty days through the finance portal.",
    "Parental leave lasts sixteen weeks at full pay for every employee, whatever their role.",
]


def make_file(
    tenant: Tenant,
    name: str,
    *,
    status: str = FileStatus.READY,
    purpose: str = FilePurpose.KNOWLEDGE,
) -> StoredFile:
    content = name.encode()
    return StoredFile.objects.create(
        tenant=tenant,
        purpose=purpose,
        name=name,
        content_type="application/pdf",
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        blob=ContentFile(content, name="x"),
        status=status,
    )


def add_chunks(stored_file: StoredFile, texts: list[str], *, heading: str = "") -> list[Chunk]:
    return Chunk.objects.bulk_create(
        Chunk(
            tenant_id=stored_file.tenant_id,
            file=stored_file,
            ordinal=ordinal,
            text=text,
            page=ordinal + 1,
            heading=heading,
        )
        for ordinal, text in enumerate(texts)
    )


def make_knowledge_base(tenant: Tenant, name: str, files: list[StoredFile]) -> KnowledgeBase:
    knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name=name)
    for stored_file in files:
        KnowledgeDocument.objects.create(tenant=tenant, knowledge_base=knowledge_base, file=stored_file)
    return knowledge_base


@pytest.fixture
def handbook(cast: Cast) -> KnowledgeBase:
    handbook_file = make_file(cast.tenant_a, "handbook.pdf")
    add_chunks(handbook_file, HANDBOOK_PAGES, heading="People")
    return make_knowledge_base(cast.tenant_a, "Handbook", [handbook_file])


def kb_scope(knowledge_base: KnowledgeBase) -> SearchScope:
    return SearchScope(tenant_id=knowledge_base.tenant_id, knowledge_base_ids=(knowledge_base.pk,))


def test_the_passage_holding_the_answer_ranks_first_with_its_page(handbook: KnowledgeBase) -> None:
    passages = search_passages(kb_scope(handbook), "How long is parental leave?")

    chunk = Chunk.objects.get(text=HANDBOOK_PAGES[2])
    assert passages[0] == Passage(
        chunk_id=chunk.pk,
        file_id=chunk.file_id,
        document="handbook.pdf",
        page=3,
        heading="People",
        text=HANDBOOK_PAGES[2],
        score=1 / 61,
    )
    assert len(passages) == 1


def test_the_limit_bounds_the_passages(handbook: KnowledgeBase) -> None:
    scope = kb_scope(handbook)
    # "employee" is on pages 1 and 3; page 3 also holds "leave".
    assert [passage.page for passage in search_passages(scope, "employee leave")] == [3, 1]
    assert [passage.page for passage in search_passages(scope, "employee leave", limit=1)] == [3]
    assert search_passages(scope, "employee leave", limit=0) == []


def test_another_tenants_chunks_are_never_found(cast: Cast, handbook: KnowledgeBase) -> None:
    carol_file = make_file(cast.tenant_b, "census.pdf")
    add_chunks(carol_file, ["The quokka census of the northern islands counted 412 animals."])
    make_knowledge_base(cast.tenant_b, "Census", [carol_file])

    assert search_passages(kb_scope(handbook), "quokka census") == []
    assert search_passages(SearchScope(tenant_id=cast.tenant_a.pk, file_ids=(carol_file.pk,)), "quokka") == []


def test_another_tenants_knowledge_base_finds_nothing(cast: Cast, handbook: KnowledgeBase) -> None:
    carol_file = make_file(cast.tenant_b, "census.pdf")
    add_chunks(carol_file, ["The quokka census of the northern islands counted 412 animals."])
    carol_base = make_knowledge_base(cast.tenant_b, "Census", [carol_file])

    scope = SearchScope(tenant_id=cast.tenant_a.pk, knowledge_base_ids=(carol_base.pk,))

    assert search_passages(scope, "quokka census") == []
    assert search_passages(kb_scope(carol_base), "quokka census")[0].document == "census.pdf"


@pytest.mark.parametrize("status", [FileStatus.QUEUED, FileStatus.PROCESSING, FileStatus.FAILED])
def test_files_that_are_not_ready_are_not_searched(cast: Cast, handbook: KnowledgeBase, status: str) -> None:
    draft = make_file(cast.tenant_a, "draft.pdf", status=status)
    add_chunks(draft, ["The aurora protocol is described in the appendix."])
    KnowledgeDocument.objects.create(tenant=cast.tenant_a, knowledge_base=handbook, file=draft)

    assert search_passages(kb_scope(handbook), "aurora protocol") == []
    assert search_passages(SearchScope(tenant_id=cast.tenant_a.pk, file_ids=(draft.pk,)), "aurora") == []


def test_a_file_ids_scope_searches_those_files_only(cast: Cast, handbook: KnowledgeBase) -> None:
    attachment = make_file(cast.tenant_a, "invoice.pdf", purpose=FilePurpose.ATTACHMENT)
    other = make_file(cast.tenant_a, "other.pdf", purpose=FilePurpose.ATTACHMENT)
    add_chunks(attachment, ["The lighthouse repair invoice number is 4471."])
    add_chunks(other, ["The lighthouse keeper retired in spring."])
    scope = SearchScope(tenant_id=cast.tenant_a.pk, file_ids=(attachment.pk,))

    assert [(passage.document, passage.page) for passage in search_passages(scope, "lighthouse repair")] == [
        ("invoice.pdf", 1)
    ]
    assert search_passages(scope, "parental leave") == []
    assert search_passages(kb_scope(handbook), "lighthouse") == []


def test_knowledge_bases_and_files_together(cast: Cast, handbook: KnowledgeBase) -> None:
    attachment = make_file(cast.tenant_a, "invoice.pdf", purpose=FilePurpose.ATTACHMENT)
    add_chunks(attachment, ["Reimbursement of the lighthouse repair invoice is due."])
    scope = SearchScope(
        tenant_id=cast.tenant_a.pk, knowledge_base_ids=(handbook.pk,), file_ids=(attachment.pk,)
    )

    assert sorted(passage.document for passage in search_passages(scope, "reimbursement")) == [
        "handbook.pdf",
        "invoice.pdf",
    ]


def test_an_empty_scope_finds_nothing(cast: Cast, handbook: KnowledgeBase) -> None:
    assert search_passages(SearchScope(tenant_id=cast.tenant_a.pk), "parental leave") == []


def test_the_index_follows_updates_and_deletes(handbook: KnowledgeBase) -> None:
    chunk = Chunk.objects.get(text=HANDBOOK_PAGES[1])
    Chunk.objects.filter(pk=chunk.pk).update(text="Mileage allowance is paid monthly.")

    assert [passage.chunk_id for passage in search_passages(kb_scope(handbook), "mileage")] == [chunk.pk]
    assert search_passages(kb_scope(handbook), "receipts") == []

    Chunk.objects.filter(pk=chunk.pk).delete()
    assert search_passages(kb_scope(handbook), "mileage") == []


@pytest.mark.parametrize(
    "query", ['"', "*", "NEAR(", ":", "'", "&|!", "", "   ", "the of and", "\" * NEAR( : ' & | ! ( ) - ^ +"]
)
def test_queries_without_words_find_nothing_and_never_raise(handbook: KnowledgeBase, query: str) -> None:
    assert search_passages(kb_scope(handbook), query) == []


@pytest.mark.parametrize(
    "query",
    ['"parental" NEAR(leave*', "parental:* & !leave | 'x'", "parental' OR leave --", "parental\\leave"],
)
def test_query_syntax_around_words_is_taken_as_words(handbook: KnowledgeBase, query: str) -> None:
    assert search_passages(kb_scope(handbook), query)[0].page == 3


@pytest.fixture
def hashing_embeddings(settings: Any) -> None:
    settings.MEMORY_EMBEDDINGS_BACKEND = "test-hashing"


@pytest.fixture
def analytics(cast: Cast) -> tuple[KnowledgeBase, list[Chunk]]:
    stored_file = make_file(cast.tenant_a, "analytics.pdf")
    chunks = add_chunks(stored_file, ["Monthly churn report.", "We analyze the logs."])
    return make_knowledge_base(cast.tenant_a, "Analytics", [stored_file]), chunks


@pytest.mark.usefixtures("hashing_embeddings")
def test_vectors_find_a_spelling_variant_full_text_misses(
    analytics: tuple[KnowledgeBase, list[Chunk]], settings: Any
) -> None:
    knowledge_base, chunks = analytics
    embed_chunks(chunks)

    assert [passage.text for passage in search_passages(kb_scope(knowledge_base), "analyse")] == [
        "We analyze the logs."
    ]
    settings.MEMORY_EMBEDDINGS_BACKEND = "none"
    assert search_passages(kb_scope(knowledge_base), "analyse") == []


@pytest.mark.usefixtures("hashing_embeddings")
def test_fusion_ranks_a_chunk_found_both_ways_above_one_found_by_vectors_only(
    analytics: tuple[KnowledgeBase, list[Chunk]],
) -> None:
    knowledge_base, chunks = analytics
    embed_chunks(chunks)

    passages = search_passages(kb_scope(knowledge_base), "analyse churn")

    # churn report: first by full text and first by vectors; the logs: second by vectors only.
    assert [(passage.chunk_id, passage.score) for passage in passages] == [
        (chunks[0].pk, 1 / 61 + 1 / 61),
        (chunks[1].pk, 1 / 62),
    ]


def test_reciprocal_rank_fusion_sums_inverse_ranks_and_breaks_ties_by_chunk_id() -> None:
    assert reciprocal_rank_fusion([[3, 1, 2], [2, 3]]) == [
        (3, 1 / 61 + 1 / 62),
        (2, 1 / 63 + 1 / 61),
        (1, 1 / 62),
    ]
    assert reciprocal_rank_fusion([[5], [4]]) == [(4, 1 / 61), (5, 1 / 61)]


@pytest.mark.usefixtures("hashing_embeddings")
def test_embed_chunks_stores_unit_float32_vectors(analytics: tuple[KnowledgeBase, list[Chunk]]) -> None:
    _, chunks = analytics
    embed_chunks(chunks)

    stored = Chunk.objects.get(pk=chunks[0].pk)
    assert stored.embedding_model == "test-hashing"
    assert len(bytes(stored.embedding)) == 512 * 4


class FailingEmbeddings:
    name = "failing"

    def embed(self, texts: list[str]) -> list[list[float]]:
        raise EmbeddingError("embeddings endpoint answered 503", is_retryable=True)


def test_a_failing_backend_leaves_chunks_unembedded_and_full_text_answers(
    analytics: tuple[KnowledgeBase, list[Chunk]], monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge_base, chunks = analytics
    monkeypatch.setattr("files.search.embedding_backend", FailingEmbeddings)
    embed_chunks(chunks)

    assert list(
        Chunk.objects.filter(pk__in=[chunk.pk for chunk in chunks]).values_list(
            "embedding_model", "embedding"
        )
    ) == [
        ("", None),
        ("", None),
    ]
    assert [passage.chunk_id for passage in search_passages(kb_scope(knowledge_base), "churn")] == [
        chunks[0].pk
    ]
