"""Rebuild the full-text index (SQLite) and, with --embeddings, re-embed memories whose vector
is missing or from another backend or model."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memory.embeddings import embed_or_none, embedding_backend
from memory.fulltext import FULL_TEXT
from memory.models import Memory

BATCH = 64


class Command(BaseCommand):
    help = "Rebuild the memory full-text index; --embeddings also recomputes stale vectors."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--embeddings", action="store_true", help="Recompute missing or stale embeddings."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        FULL_TEXT.rebuild()
        self.stdout.write("Full-text index rebuilt.")
        if options["embeddings"]:
            self.stdout.write(f"{self._reembed()} memories re-embedded.")

    def _reembed(self) -> int:
        backend = embedding_backend()
        if backend is None:
            self.stderr.write("No embedding backend is configured (MEMORY_EMBEDDINGS_BACKEND).")
            return 0
        stale = Memory.objects.exclude(embedding_model=backend.name).only("id", "content").order_by("pk")
        done = 0
        batch: list[Memory] = []
        for memory in stale.iterator(chunk_size=BATCH):
            batch.append(memory)
            if len(batch) == BATCH:
                done += self._embed(backend, batch)
                batch = []
        if batch:
            done += self._embed(backend, batch)
        return done

    def _embed(self, backend: Any, batch: list[Memory]) -> int:
        vectors = embed_or_none(backend, [memory.content for memory in batch])
        if vectors is None:
            return 0
        for memory, vector in zip(batch, vectors, strict=True):
            Memory.objects.filter(pk=memory.pk).update(embedding=vector, embedding_model=backend.name)
        return len(batch)
