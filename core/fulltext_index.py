# ruff: noqa: S608 -- every name in these statements is a constant of the code, never input.
"""A full-text index of one text column, kept current by the database itself.

PostgreSQL: a generated ``tsvector`` column (english configuration) with a GIN index. SQLite:
an FTS5 table (porter stemmer) whose rowid is the row's integer key, kept in sync by triggers.
Triggers and a generated column keep the index current on every write path (services, admin,
bulk inserts, raw SQL, cascades), which Django signals would not. Memories and knowledge
chunks each have one (``memory.fulltext``, ``files.fulltext``); their queries stay with them.
"""

from dataclasses import dataclass

from django.db import connection
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

VENDORS = ("sqlite", "postgresql")


@dataclass(frozen=True)
class FullTextIndex:
    table: str
    column: str
    # SQLite: the integer column that is the row's rowid in the FTS5 table.
    key: str
    # Names the FTS5 table (``<prefix>_fts``), its triggers and PostgreSQL's index.
    prefix: str

    @property
    def fts_table(self) -> str:
        return f"{self.prefix}_fts"

    @property
    def triggers(self) -> tuple[str, str, str]:
        return (f"{self.fts_table}_insert", f"{self.fts_table}_delete", f"{self.fts_table}_update")

    def _sqlite_install(self) -> list[str]:
        fts, table, key, column = self.fts_table, self.table, self.key, self.column
        insert, delete, update = self.triggers
        return [
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5("
            "content, tokenize = 'porter unicode61 remove_diacritics 2')",
            f"""CREATE TRIGGER IF NOT EXISTS {insert} AFTER INSERT ON {table} BEGIN
                INSERT INTO {fts}(rowid, content) VALUES (new.{key}, new.{column});
            END""",
            f"""CREATE TRIGGER IF NOT EXISTS {delete} AFTER DELETE ON {table} BEGIN
                DELETE FROM {fts} WHERE rowid = old.{key};
            END""",
            f"""CREATE TRIGGER IF NOT EXISTS {update} AFTER UPDATE OF {column}, {key} ON {table}
            WHEN old.{column} IS NOT new.{column} OR old.{key} IS NOT new.{key} BEGIN
                DELETE FROM {fts} WHERE rowid = old.{key};
                INSERT INTO {fts}(rowid, content) VALUES (new.{key}, new.{column});
            END""",
            f"DELETE FROM {fts}",
            f"INSERT INTO {fts}(rowid, content) SELECT {key}, {column} FROM {table}",
        ]

    def _sqlite_uninstall(self) -> list[str]:
        return [f"DROP TRIGGER IF EXISTS {name}" for name in self.triggers] + [
            f"DROP TABLE IF EXISTS {self.fts_table}"
        ]

    def _postgres_install(self) -> list[str]:
        # A generated column depends on the text column: a later migration that changes that
        # column's type must drop this one first and install again.
        return [
            f"ALTER TABLE {self.table} ADD COLUMN IF NOT EXISTS search_vector tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('english'::regconfig, {self.column})) STORED",
            # Without fastupdate, every search would also scan the index's pending list of
            # recent inserts (up to 4 MB until a vacuum): these rows are read far more than written.
            f"CREATE INDEX IF NOT EXISTS {self.prefix}_search_vector ON {self.table} "
            "USING GIN (search_vector) WITH (fastupdate = off)",
        ]

    def _postgres_uninstall(self) -> list[str]:
        return [
            f"DROP INDEX IF EXISTS {self.prefix}_search_vector",
            f"ALTER TABLE {self.table} DROP COLUMN IF EXISTS search_vector",
        ]

    def install(self, schema_editor: BaseDatabaseSchemaEditor) -> None:
        """Create the index and what keeps it in sync, then fill it (idempotent).

        On SQLite, a migration that rebuilds the table (most field changes do) drops its
        triggers: such a migration must install again.
        """
        vendor = schema_editor.connection.vendor
        if vendor not in VENDORS:
            raise NotImplementedError(f"full-text search supports SQLite and PostgreSQL, not {vendor}")
        statements = self._sqlite_install() if vendor == "sqlite" else self._postgres_install()
        for statement in statements:
            schema_editor.execute(statement)

    def uninstall(self, schema_editor: BaseDatabaseSchemaEditor) -> None:
        vendor = schema_editor.connection.vendor
        statements = {"sqlite": self._sqlite_uninstall, "postgresql": self._postgres_uninstall}.get(vendor)
        for statement in statements() if statements else []:
            schema_editor.execute(statement)

    def rebuild(self) -> None:
        """Reinstall SQLite's triggers and refill the index from the table (nothing to do on PostgreSQL)."""
        if connection.vendor != "sqlite":
            return
        with connection.cursor() as cursor:
            for statement in self._sqlite_install():
                cursor.execute(statement)

    def is_in_sync(self) -> bool:
        """False when SQLite's triggers are missing (a table rebuild dropped them)."""
        if connection.vendor != "sqlite":
            return True
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s", [self.table]
            )
            names = {row[0] for row in cursor.fetchall()}
        return names.issuperset(self.triggers)
