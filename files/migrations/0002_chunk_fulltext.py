"""The full-text index of chunks: PostgreSQL tsvector + GIN, SQLite FTS5 + triggers.

Not model fields (see files.fulltext), so ``makemigrations`` has nothing to say about them.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from files.fulltext import FULL_TEXT


def install(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    FULL_TEXT.install(schema_editor)


def uninstall(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    FULL_TEXT.uninstall(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("files", "0001_initial")]

    operations = [migrations.RunPython(install, uninstall)]
