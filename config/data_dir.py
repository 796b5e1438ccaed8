"""The data folder (``AGENTRY_DATA_DIR``) and what Agentry keeps in it, private to the account
that runs it: the SQLite database, the generated keys, the file cache and the uploads."""

import os
import secrets
from collections.abc import Callable
from pathlib import Path

PRIVATE_FOLDER_MODE = 0o700
# Others may pass through to a folder inside (the sandbox's), but not list or read anything.
PASSABLE_FOLDER_MODE = 0o711
PRIVATE_FILE_MODE = 0o600
# Written beside a SQLite database, with the database file's own mode.
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def make_private_folder(path: Path, *, lets_others_pass: bool = False) -> None:
    """Creates ``path`` for its owner alone, and closes one an older version left open."""
    mode = PASSABLE_FOLDER_MODE if lets_others_pass else PRIVATE_FOLDER_MODE
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    if is_owned(path):
        path.chmod(mode)


def make_private_sqlite_file(path: Path) -> None:
    """Creates the database file 0600 before SQLite opens it: SQLite gives its WAL and shared-memory
    files the database file's mode, so all of them stay private."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE)
    os.close(descriptor)
    for file in (path, *(path.with_name(path.name + suffix) for suffix in SQLITE_COMPANIONS)):
        if file.exists() and is_owned(file):
            file.chmod(PRIVATE_FILE_MODE)


def read_or_create_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret kept in ``path``, made once. Processes starting together (the server and the
    worker) agree on one: the file appears whole or not at all, and the first one written wins."""
    if not path.exists():
        draft = path.with_name(f".{path.name}.{os.getpid()}")
        descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
        with os.fdopen(descriptor, "w") as file:
            file.write(make() + "\n")
        try:
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    return path.read_text().strip()


def new_secret_key() -> str:
    return secrets.token_urlsafe(50)


def is_owned(path: Path) -> bool:
    return path.stat().st_uid == os.geteuid()
