"""Enable pgvector for knowledge search after the extension was installed on the server, and
copy the stored chunk embeddings into it (what migration 0003 does when pgvector is there)."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import connection

from files.vectors import backfill_vectors, install_vectors


class Command(BaseCommand):
    help = "Use pgvector for knowledge search: create the extension and column, copy the embeddings."

    def handle(self, *args: Any, **options: Any) -> None:
        if not install_vectors(connection):
            raise CommandError(
                "pgvector is not available to this database (PostgreSQL with the vector extension "
                "installed on the server, created by a superuser); knowledge search keeps the Python scan."
            )
        copied = backfill_vectors(connection)
        self.stdout.write(
            f"pgvector enabled, {copied} chunk vectors copied; "
            "restart web and worker processes, then run this again to copy what they wrote meanwhile."
        )
