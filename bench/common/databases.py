"""Databases created and dropped for one benchmark run: an SQLite file, or a PostgreSQL database."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.common.processes import BenchError

# --- Databases ------------------------------------------------------------------------------------


class BenchDatabase:
    """A database that exists only for one benchmark run."""

    url: str
    label: str

    def create(self) -> None:
        raise NotImplementedError

    def drop(self) -> None:
        raise NotImplementedError


class SqliteBenchDatabase(BenchDatabase):
    def __init__(self, directory: Path) -> None:
        self.path = directory / "bench.sqlite3"
        self.url = f"sqlite:///{self.path}"
        self.label = "SQLite + ORM broker"

    def create(self) -> None:
        """``migrate`` creates the file."""

    def drop(self) -> None:
        """The temporary directory goes, and the file with it."""


DATABASE_NAME = re.compile(r"^[A-Za-z0-9_]+$")


class PostgresBenchDatabase(BenchDatabase):
    """Creates the database named in ``url`` (dropping a leftover first) and drops it at the end.

    The name must contain "bench": this class drops databases, and should never be pointed at a
    real one by a slip of the command line.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.name = parts.path.lstrip("/")
        if not DATABASE_NAME.match(self.name) or "bench" not in self.name:
            raise BenchError(
                f"the bench database name must contain 'bench' (letters, digits, _): {self.name!r}"
            )
        self.url = url
        self.label = "PostgreSQL"
        self._maintenance_url = urlunsplit(parts._replace(path="/postgres"))

    def _execute(self, statement: str) -> None:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self._maintenance_url, autocommit=True, connect_timeout=10) as connection:
            connection.execute(sql.SQL(statement).format(sql.Identifier(self.name)))

    def create(self) -> None:
        self.drop()
        self._execute("CREATE DATABASE {}")

    def drop(self) -> None:
        self._execute("DROP DATABASE IF EXISTS {} WITH (FORCE)")
