"""pgvector's ``vector`` copy of chunk embeddings, on PostgreSQL when the extension is available.

Not a model field (see files.vectors, as files.fulltext's tsvector column), so ``makemigrations``
has nothing to say about it; elsewhere this migration does nothing and search keeps the exact
scan in Python. ``manage.py knowledge_vectors`` does the same after pgvector is installed later.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from files.vectors import backfill_vectors, install_vectors, uninstall_vectors


def install(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if install_vectors(schema_editor.connection):
        backfill_vectors(schema_editor.connection)


def uninstall(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    uninstall_vectors(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("files", "0002_chunk_fulltext")]

    operations = [migrations.RunPython(install, uninstall)]
