"""Memory retrieval latency at 10,000 and 100,000 memories in one tenant.

Everything is one agent's (the worst case: retrieval filters by tenant and agent first).
The corpus is synthetic but shaped like real memories: template sentences whose topic
words follow a Zipf distribution over a 6,000-word vocabulary, so some words are in
thousands of memories and most in a handful. Each query mixes words of one memory with
random ones. Measured: ``memory.retrieval.search_memories`` (full text, ranking, recency,
diversity: what a run pays each turn before calling the model), in-process, no HTTP.

    .venv/bin/python bench/memory_retrieval.py                       # SQLite (FTS5), temp file
    .venv/bin/python bench/memory_retrieval.py \\
        --database-url postgres://postgres@127.0.0.1:5432/agentry_bench_memory

The PostgreSQL database is created for the run and dropped after it (its name must
contain "bench"); the SQLite file lives in a temporary directory that is removed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

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

TEMPLATES = [
    "The user {verb} {noun} for the {noun2} project.",
    "The user prefers {noun} over {noun2} when working on {noun3}.",
    "{name} from {place} asked the user about the {noun} and the {noun2}.",
    "The user's {noun} meeting with {name} is every {day}.",
    "The user is planning a trip to {place} to see the {noun}.",
    "Remember that the {noun} of the {noun2} team is due on {day}.",
    "The user {verb} the {noun} and dislikes {noun2}.",
    "The user's {noun} is kept in the {noun2} near {place}.",
]
VERBS = [
    "likes",
    "uses",
    "bought",
    "repaired",
    "ordered",
    "studies",
    "avoids",
    "shares",
    "reviewed",
    "tracks",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
FILLERS = ["what about the", "tell me about", "do you remember the", "how is", "any news on", "when is the"]
SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "ren",
    "tas",
    "vo",
    "qui",
    "del",
    "fa",
    "gor",
    "hu",
    "ni",
    "pra",
    "sel",
    "tu",
    "zan",
]
VOCABULARY_SIZE = 6000
ZIPF_EXPONENT = 1.05
BATCH_SIZE = 2000


class Corpus:
    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        words = sorted({"".join(parts) for parts in itertools.product(SYLLABLES, repeat=4)})
        self.random.shuffle(words)
        self.nouns = words[:VOCABULARY_SIZE]
        self.names = [word.capitalize() for word in words[VOCABULARY_SIZE : VOCABULARY_SIZE + 300]]
        self.places = [
            word.capitalize() + "ville" for word in words[VOCABULARY_SIZE + 300 : VOCABULARY_SIZE + 500]
        ]
        weights = [1 / rank**ZIPF_EXPONENT for rank in range(1, len(self.nouns) + 1)]
        self.cumulative = list(itertools.accumulate(weights))

    def noun(self) -> str:
        return self.random.choices(self.nouns, cum_weights=self.cumulative)[0]

    def memory(self) -> str:
        template = self.random.choice(TEMPLATES)
        return template.format(
            verb=self.random.choice(VERBS),
            noun=self.noun(),
            noun2=self.noun(),
            noun3=self.noun(),
            name=self.random.choice(self.names),
            place=self.random.choice(self.places),
            day=self.random.choice(DAYS),
        )

    def query(self, memories: list[str]) -> str:
        """Two to three words of a stored memory plus one to three others, in a phrase."""
        source = [word.strip(".,'s") for word in self.random.choice(memories).split() if len(word) > 4]
        picked = self.random.sample(source, k=min(len(source), self.random.randint(2, 3)))
        extra = [self.noun() for _ in range(self.random.randint(1, 3))]
        words = picked + extra
        self.random.shuffle(words)
        return f"{self.random.choice(FILLERS)} {' '.join(words)}?"


def configure_django(database_url: str, data_directory: Path) -> None:
    from cryptography.fernet import Fernet

    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=database_url,
        AGENTRY_DATA_DIR=str(data_directory),
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(48),
        ALLOWED_HOSTS="localhost",
        FIELD_ENCRYPTION_KEYS=Fernet.generate_key().decode(),
    )
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def insert_memories(agent: Any, corpus: Corpus, count: int) -> list[str]:
    from django.db import connection

    from memory.models import Memory

    contents = []
    for start in range(0, count, BATCH_SIZE):
        batch = []
        for _ in range(min(BATCH_SIZE, count - start)):
            content = corpus.memory()
            contents.append(content)
            batch.append(
                Memory(
                    tenant_id=agent.tenant_id,
                    agent=agent,
                    content=content,
                    importance=round(corpus.random.uniform(0.1, 1.0), 2),
                )
            )
        Memory.objects.bulk_create(batch)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    return contents


def measure(agent: Any, queries: list[str], *, warmup: int) -> tuple[list[float], float]:
    from memory.retrieval import search_memories

    for query in queries[:warmup]:
        search_memories(tenant=agent.tenant, agent=agent, query=query, limit=5)
    timings = []
    returned = 0
    for query in queries:
        started = time.perf_counter()
        results = search_memories(tenant=agent.tenant, agent=agent, query=query, limit=5)
        timings.append((time.perf_counter() - started) * 1000)
        returned += len(results)
    return timings, returned / len(queries)


def run(postgres_url: str, sizes: list[int], query_count: int, seed: int) -> list[dict[str, Any]]:
    """Measure on a throwaway PostgreSQL database (``postgres_url``), else on SQLite in a temp directory."""
    directory = Path(tempfile.mkdtemp(prefix="agentry-bench-memory-"))
    database: BenchDatabase = (
        PostgresBenchDatabase(postgres_url) if postgres_url else SqliteBenchDatabase(directory)
    )
    try:
        database.create()
        configure_django(database.url, directory / "data")
        from agents.models import Agent
        from tenants.models import Tenant

        tenant = Tenant.objects.create(slug="bench", name="Bench")
        agent = Agent.objects.create(tenant=tenant, name="bench agent")
        corpus = Corpus(seed)
        contents: list[str] = []
        rows = []
        for size in sorted(sizes):
            log(f"inserting {size - len(contents)} memories…")
            started = time.perf_counter()
            contents += insert_memories(agent, corpus, size - len(contents))
            log(f"  done in {time.perf_counter() - started:.1f} s; measuring {query_count} queries")
            queries = [corpus.query(contents) for _ in range(query_count)]
            timings, mean_returned = measure(agent, queries, warmup=20)
            rows.append(
                {
                    "memories": size,
                    "median_ms": median(timings),
                    "p95_ms": percentile(timings, 0.95),
                    "max_ms": max(timings),
                    "mean_results": mean_returned,
                }
            )
        return rows
    finally:
        from django.db import connections

        connections.close_all()
        database.drop()
        shutil.rmtree(directory, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default="", help="postgres://…/agentry_bench_memory (else SQLite)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    arguments = parser.parse_args(argv)
    is_postgres = bool(arguments.database_url) and not arguments.database_url.startswith("sqlite:")
    load_before = load_average()
    with stop_on_signals():
        rows = run(
            arguments.database_url if is_postgres else "", arguments.sizes, arguments.queries, arguments.seed
        )
    label = "PostgreSQL (tsvector + GIN)" if is_postgres else "SQLite (FTS5)"
    print(f"memory retrieval, {label}, commit {git_commit()}, {arguments.queries} queries, limit 5")
    print(f"load average {load_before:.2f} before, {load_average():.2f} after ({os.cpu_count()} CPUs)")
    print(f"{'memories':>10} {'median ms':>10} {'p95 ms':>8} {'max ms':>8} {'results':>8}")
    for row in rows:
        print(
            f"{row['memories']:>10,} {row['median_ms']:>10.2f} {row['p95_ms']:>8.2f} "
            f"{row['max_ms']:>8.2f} {row['mean_results']:>8.1f}"
        )


if __name__ == "__main__":
    main()
