"""Knowledge search: ingest time per 100 PDF pages, search latency and recall@5 at 100,000 chunks.

The corpus is synthetic but shaped like documents: sentences of English function words,
everyday content words and Zipf-distributed words of a 6,000-word generated vocabulary, so
some words are in tens of thousands of chunks and most in a handful; 500 files in 3 tenants,
each tenant's files in one knowledge base. Facts are planted in chunks of the searched tenant,
each fact's subject also named in distractor chunks; each question asks for one of them.
Measured in-process, no HTTP: ``files.search.search_passages`` (what ``file_search`` pays).

    .venv/bin/python bench/knowledge.py                       # SQLite (FTS5), temp file
    .venv/bin/python bench/knowledge.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench_knowledge

The PostgreSQL database is created for the run and dropped after it (its name must
contain "bench"); the SQLite file lives in a temporary directory that is removed.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    BenchDatabase,
    PostgresBenchDatabase,
    SqliteBenchDatabase,
    git_commit,
    load_average,
    log,
    median,
    percentile,
    stop_on_signals,
)
from bench.memory_retrieval import Corpus, configure_django

EVERYDAY_WORD_TEXT = """
    account approval audit backup balance budget calibration capacity certificate channel
    compliance contract customer deadline delivery deployment discount engine equipment
    estimate export filter firmware freight gateway grant hardware incident insurance
    inventory invoice license maintenance margin meeting migration network onboarding
    outage payment payroll permit pipeline policy pressure procurement quarter refund
    release renewal report request retention review router safety schedule sensor server
    shipment signature storage supplier support survey tariff temperature training
    transfer turbine upgrade valve vendor voltage warehouse warranty workflow
"""
EVERYDAY_WORDS = EVERYDAY_WORD_TEXT.split()
SENTENCES = [
    "The {a} {b} for the {c} was {verb} after the {d} review.",
    "Each {a} must record the {b} and the {c} before the {d} is {verb}.",
    "In the {a} {b}, the {c} team {verb} the {d} twice a quarter.",
    "A {a} of the {b} is kept with the {c} and {verb} by the {d} office.",
    "If the {a} fails, the {b} {verb} the {c} and notifies the {d}.",
    "The {a} and the {b} are {verb} by the {c} under the {d} rules.",
]
VERBS = ["checked", "approved", "updated", "archived", "replaced", "measured", "signed", "moved"]
# (fact planted in one chunk, the question that asks for it); {x} is a subject unique to the fact.
FACTS = [
    ("The {x} turbine must be inspected every 14 weeks.", "how often is the {x} turbine inspected"),
    ("Refunds for {x} customers are paid within 9 days.", "when are refunds paid to {x} customers"),
    ("The {x} warehouse holds 4,000 pallets at most.", "what is the capacity of the {x} warehouse"),
    ("The {x} router firmware is upgraded on the first Monday.", "when is the {x} router firmware upgraded"),
    ("Payroll for the {x} office closes on the 25th.", "when does payroll close for the {x} office"),
    ("The {x} valve pressure limit is 12 bar.", "pressure limit of the {x} valve"),
    ("Backups of the {x} server are kept for 90 days.", "retention of {x} server backups"),
    ("The {x} license renewal costs 1,200 euros a year.", "cost of the {x} license renewal"),
    ("Freight to {x} is insured up to 50,000 euros.", "insurance of freight to {x}"),
    (
        "The {x} sensor reports temperature every 30 seconds.",
        "how often does the {x} sensor report temperature",
    ),
    ("Onboarding at {x} takes three days of training.", "how long is onboarding training at {x}"),
    ("The {x} supplier offers a 7 percent discount.", "discount from the {x} supplier"),
    ("Incidents on the {x} gateway go to the network on-call.", "who handles incidents on the {x} gateway"),
    ("The {x} pipeline deployment needs two approvals.", "approvals needed for {x} pipeline deployment"),
    ("Shipments from {x} need a customs signature.", "what do shipments from {x} need"),
    ("The {x} budget review happens in the third quarter.", "when is the {x} budget review"),
    ("The {x} contract deadline is the end of March.", "deadline of the {x} contract"),
    ("Safety training for {x} equipment is yearly.", "how often is safety training for {x} equipment"),
    ("The {x} storage tariff is 3 euros per pallet.", "storage tariff at {x}"),
    ("Audit reports of {x} are signed by the auditor.", "who signs the {x} audit reports"),
    ("The {x} grant covers half of the hardware.", "what does the {x} grant cover"),
    ("Voltage at the {x} substation is 20 kilovolts.", "voltage at the {x} substation"),
    ("The {x} migration moves invoices to the new ledger.", "what does the {x} migration move"),
    ("Warranty claims for {x} engines expire after two years.", "warranty of {x} engines"),
]
DISTRACTORS_PER_FACT = 30
TENANT_FILE_COUNTS = (170, 170, 160)
BATCH_SIZE = 2000


@dataclass
class PlantedFact:
    question: str
    chunk_ordinal: int
    file_index: int


class Documents:
    """Page and chunk text from a seeded corpus (the memory bench's vocabulary)."""

    def __init__(self, seed: int) -> None:
        self.corpus = Corpus(seed)
        self.random = self.corpus.random
        # Subjects of the planted facts: generated words no other text uses.
        self.subjects = [noun.capitalize() + "ex" for noun in self.corpus.nouns[-len(FACTS) :]]

    def word(self) -> str:
        if self.random.random() < 0.3:
            return self.random.choice(EVERYDAY_WORDS)
        return self.corpus.noun()

    def sentence(self) -> str:
        template = self.random.choice(SENTENCES)
        return template.format(
            a=self.word(), b=self.word(), c=self.word(), d=self.word(), verb=self.random.choice(VERBS)
        )

    def chunk(self, sentences: int = 12) -> str:
        return " ".join(self.sentence() for _ in range(sentences))


def pdf_bytes(page_texts: list[str]) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    for text in page_texts:
        pdf.add_page()
        pdf.multi_cell(0, 5, text)
    return bytes(pdf.output())


def make_file(tenant: Any, name: str, *, content: bytes = b"x") -> Any:
    from django.core.files.base import ContentFile

    from files.models import FilePurpose, FileStatus, StoredFile

    return StoredFile.objects.create(
        tenant=tenant,
        purpose=FilePurpose.KNOWLEDGE,
        name=name,
        content_type="application/pdf",
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        blob=ContentFile(content, name="x"),
        status=FileStatus.READY,
    )


def measure_ingest(tenant: Any, documents: Documents, *, pages: int, repeats: int) -> tuple[list[float], int]:
    """Seconds per ingest of a ``pages``-page PDF: extraction, chunking and the chunks' insert."""
    from files.chunking import chunk_sections
    from files.extraction import extract_sections
    from files.models import Chunk

    page_texts = [documents.chunk(sentences=24) for _ in range(pages)]
    content = pdf_bytes(page_texts)
    timings = []
    chunk_count = 0
    for repeat in range(repeats):
        stored_file = make_file(tenant, f"ingest-{repeat}.pdf", content=content)
        started = time.perf_counter()
        sections = extract_sections(io.BytesIO(content), "application/pdf")
        located = [(chunk.text, chunk.page) for chunk in chunk_sections(sections)]
        Chunk.objects.bulk_create(
            Chunk(tenant=tenant, file=stored_file, ordinal=ordinal, text=text, page=page)
            for ordinal, (text, page) in enumerate(located)
        )
        timings.append(time.perf_counter() - started)
        chunk_count = len(located)
    return timings, chunk_count


def _embed(text: str) -> bytes:
    from memory.embeddings import HashingTestEmbeddings

    return array("f", HashingTestEmbeddings().embed([text])[0]).tobytes()


def build_corpus(
    documents: Documents, tenants: list[Any], *, chunks_per_file: int, embed_tenant: Any
) -> list[PlantedFact]:
    """Insert the files and chunks; the first tenant's chunks get hashing vectors (for hybrid)."""
    from files.models import KnowledgeBase, KnowledgeDocument

    searched_files = TENANT_FILE_COUNTS[0]
    plan = plant_plan(documents, searched_files, chunks_per_file)
    with multiprocessing.Pool() as pool:
        for tenant, file_count in zip(tenants, TENANT_FILE_COUNTS, strict=True):
            knowledge_base = KnowledgeBase.objects.create(tenant=tenant, name="Library")
            rows: list[tuple[Any, int, str]] = []
            for file_index in range(file_count):
                stored_file = make_file(tenant, f"{tenant.slug}-document-{file_index:03}.pdf")
                KnowledgeDocument.objects.create(
                    tenant=tenant, knowledge_base=knowledge_base, file=stored_file
                )
                for ordinal in range(chunks_per_file):
                    text = documents.chunk()
                    plant = plan.get((file_index, ordinal)) if tenant is embed_tenant else None
                    if plant is not None:
                        text = plant.apply(text)
                    rows.append((stored_file, ordinal, text))
                if len(rows) >= BATCH_SIZE:
                    insert_chunks(rows, pool if tenant is embed_tenant else None)
                    rows = []
            insert_chunks(rows, pool if tenant is embed_tenant else None)
            log(f"  {tenant.slug}: {file_count} files inserted")
    return planted_facts(documents, plan)


@dataclass(frozen=True)
class Plant:
    """A sentence put in the middle of one chunk: a fact (``fact_index``) or a distractor (None)."""

    sentence: str
    fact_index: int | None = None

    def apply(self, text: str) -> str:
        cut = text.find(". ", len(text) // 2) + 2
        return f"{text[:cut]}{self.sentence} {text[cut:]}"


def plant_plan(documents: Documents, file_count: int, chunks_per_file: int) -> dict[tuple[int, int], Plant]:
    """(file index, ordinal) → what to plant there: each fact once, its subject in distractors."""
    per_fact = 1 + DISTRACTORS_PER_FACT
    places = documents.random.sample(
        [(file, ordinal) for file in range(file_count) for ordinal in range(chunks_per_file)],
        len(FACTS) * per_fact,
    )
    plan: dict[tuple[int, int], Plant] = {}
    for index, (fact, _) in enumerate(FACTS):
        subject = documents.subjects[index]
        own = places[index * per_fact : (index + 1) * per_fact]
        plan[own[0]] = Plant(fact.format(x=subject), fact_index=index)
        for place in own[1:]:
            plan[place] = Plant(f"The {subject} {documents.word()} was {documents.random.choice(VERBS)}.")
    return plan


def planted_facts(documents: Documents, plan: dict[tuple[int, int], Plant]) -> list[PlantedFact]:
    return [
        PlantedFact(
            question=FACTS[plant.fact_index][1].format(x=documents.subjects[plant.fact_index]) + "?",
            chunk_ordinal=ordinal,
            file_index=file_index,
        )
        for (file_index, ordinal), plant in plan.items()
        if plant.fact_index is not None
    ]


def insert_chunks(rows: list[tuple[Any, int, str]], pool: Any) -> None:
    from files.models import Chunk
    from files.vectors import store_vectors

    embeddings = pool.map(_embed, [text for _, _, text in rows], chunksize=64) if pool else [None] * len(rows)
    created = Chunk.objects.bulk_create(
        Chunk(
            tenant_id=stored_file.tenant_id,
            file=stored_file,
            ordinal=ordinal,
            text=text,
            page=ordinal // 2 + 1,
            embedding=embedding,
            embedding_model="test-hashing" if embedding else "",
        )
        for (stored_file, ordinal, text), embedding in zip(rows, embeddings, strict=True)
    )
    store_vectors(created)  # as ingestion does: the pgvector column, when the database has it


def latency_and_recall(
    scope: Any, queries: list[str], facts: list[PlantedFact], answers: dict[str, int]
) -> dict[str, float]:
    from files.search import search_passages

    for query in queries[:20]:
        search_passages(scope, query)
    timings = []
    for query in queries:
        started = time.perf_counter()
        search_passages(scope, query)
        timings.append((time.perf_counter() - started) * 1000)
    found = sum(
        answers[fact.question] in [p.chunk_id for p in search_passages(scope, fact.question)]
        for fact in facts
    )
    return {
        "median_ms": median(timings),
        "p95_ms": percentile(timings, 0.95),
        "recall_at_5": found / len(facts),
    }


def latency_queries(documents: Documents, count: int) -> list[str]:
    """Two or three content words of a generated sentence, with the words a person adds."""
    fillers = ["what does the policy say about", "where is", "how do we handle", "find the", "who checks the"]
    queries = []
    for _ in range(count):
        words = [word.strip(".,") for word in documents.sentence().split() if len(word) > 4]
        picked = documents.random.sample(words, k=min(len(words), documents.random.randint(2, 3)))
        queries.append(f"{documents.random.choice(fillers)} {' '.join(picked)}?")
    return queries


def run(postgres_url: str, arguments: argparse.Namespace) -> dict[str, Any]:
    directory = Path(tempfile.mkdtemp(prefix="agentry-bench-knowledge-"))
    database: BenchDatabase = (
        PostgresBenchDatabase(postgres_url) if postgres_url else SqliteBenchDatabase(directory)
    )
    try:
        database.create()
        configure_django(database.url, directory / "data")
        return measure_all(arguments)
    finally:
        from django.db import connections

        connections.close_all()
        database.drop()
        shutil.rmtree(directory, ignore_errors=True)


def measure_all(arguments: argparse.Namespace) -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection

    from files.models import Chunk, KnowledgeBase
    from files.search import SearchScope
    from files.vectors import vector_search_path
    from tenants.models import Tenant

    documents = Documents(arguments.seed)
    tenants = [Tenant.objects.create(slug=f"bench-{index}", name=f"Bench {index}") for index in range(3)]
    log("ingest: generating a 100-page PDF…")
    ingest, ingest_chunks = measure_ingest(tenants[2], documents, pages=100, repeats=3)
    Chunk.objects.filter(file__name__startswith="ingest-").delete()
    chunks_per_file = arguments.chunks // sum(TENANT_FILE_COUNTS)
    log(f"inserting {chunks_per_file * sum(TENANT_FILE_COUNTS):,} chunks in {sum(TENANT_FILE_COUNTS)} files…")
    started = time.perf_counter()
    facts = build_corpus(documents, tenants, chunks_per_file=chunks_per_file, embed_tenant=tenants[0])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    log(f"  done in {time.perf_counter() - started:.0f} s")
    knowledge_base = KnowledgeBase.objects.get(tenant=tenants[0])
    scope = SearchScope(tenant_id=tenants[0].pk, knowledge_base_ids=(knowledge_base.pk,))
    answers = {
        fact.question: Chunk.objects.get(
            file__name=f"bench-0-document-{fact.file_index:03}.pdf", ordinal=fact.chunk_ordinal
        ).pk
        for fact in facts
    }
    queries = latency_queries(documents, arguments.queries)
    settings.MEMORY_EMBEDDINGS_BACKEND = "none"
    log("measuring full text…")
    full_text = latency_and_recall(scope, queries, facts, answers)
    settings.MEMORY_EMBEDDINGS_BACKEND = "test-hashing"
    hybrid = {}
    if vector_search_path() == "pgvector":
        log("measuring hybrid, pgvector…")
        hybrid["pgvector"] = latency_and_recall(scope, queries, facts, answers)
    # The fallback measured on the same corpus and database, so the two paths pair up.
    with mock.patch("files.search.vector_search_path", return_value="python-scan"):
        for scan_limit in arguments.scan_limit:
            settings.KNOWLEDGE_VECTOR_SCAN_LIMIT = scan_limit
            log(f"measuring hybrid, Python scan of {scan_limit:,}…")
            hybrid[f"scan {scan_limit:,}"] = latency_and_recall(scope, queries, facts, answers)
    return {
        "chunks": Chunk.objects.count(),
        "searched_chunks": Chunk.objects.filter(tenant=tenants[0]).count(),
        "ingest_seconds": median(ingest),
        "ingest_chunks": ingest_chunks,
        "full_text": full_text,
        "hybrid": hybrid,
        "facts": len(facts),
    }


def print_table(
    result: dict[str, Any], arguments: argparse.Namespace, label: str, load_before: float
) -> None:
    print(f"knowledge search, {label}, commit {git_commit()}, {arguments.queries} queries, limit 5")
    print(f"load average {load_before:.2f} before, {load_average():.2f} after ({os.cpu_count()} CPUs)")
    what = "extraction + chunking + insert"
    seconds = result["ingest_seconds"]
    print(
        f"\ningest of a 100-page PDF ({result['ingest_chunks']} chunks), {what}: {seconds:.2f} s, median of 3"
    )
    print(
        f"\n{result['chunks']:,} chunks in all, {result['searched_chunks']:,} in the knowledge base searched"
    )
    print("\n| search | median ms | p95 ms | recall@5 |")
    print("|---|---:|---:|---:|")
    rows = [("full text", result["full_text"])]
    rows += [(f"hybrid (test-hashing, {path})", row) for path, row in result["hybrid"].items()]
    for name, row in rows:
        found = round(row["recall_at_5"] * result["facts"])
        print(f"| {name} | {row['median_ms']:.1f} | {row['p95_ms']:.1f} | {found}/{result['facts']} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default="", help="postgres://…/agentry_bench_knowledge (else SQLite)"
    )
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument(
        "--scan-limit",
        type=int,
        nargs="+",
        default=[2000],
        help="KNOWLEDGE_VECTOR_SCAN_LIMIT of the Python scan; one hybrid row each",
    )
    parser.add_argument("--seed", type=int, default=11)
    arguments = parser.parse_args(argv)
    is_postgres = bool(arguments.database_url) and not arguments.database_url.startswith("sqlite:")
    load_before = load_average()
    with stop_on_signals():
        result = run(arguments.database_url if is_postgres else "", arguments)
    label = "PostgreSQL (tsvector + GIN)" if is_postgres else "SQLite (FTS5)"
    print_table(result, arguments, label, load_before)


if __name__ == "__main__":
    main()
