"""One writable workspace per session, kept between its ``code_run`` calls.

``<SANDBOX_ROOT>/<tenant_id>/<session_id>/`` is bound as /workspace. Code inside can plant
symlinks there, so the worker (often root) never follows one: it replaces ``output/`` and
``.code/`` wholesale and writes with O_NOFOLLOW.
"""

import os
import shutil
from pathlib import Path
from uuid import UUID

from django.conf import settings

OUTPUT_FOLDER = "output"
CODE_FOLDER = ".code"
# The session's attached files, copied in afresh at each call (read them from attachments/).
ATTACHMENTS_FOLDER = "attachments"
# Traversable but not listable: one sandbox uid cannot enumerate the others' sessions.
SHARED_FOLDER_MODE = 0o711
SESSION_FOLDER_MODE = 0o700


def sandbox_root() -> Path:
    return Path(settings.SANDBOX_ROOT)


def session_workspace_path(tenant_id: UUID, session_id: UUID) -> Path:
    return sandbox_root() / str(tenant_id) / str(session_id)


def sandbox_uid_for(session_id: UUID) -> int | None:
    """As root, each session gets its own unprivileged uid, so RLIMIT_NPROC counts per session.

    Not root: the worker's own uid (None), since it cannot switch.
    """
    if os.geteuid() != 0:
        return None
    return int(settings.SANDBOX_UID_BASE) + session_id.int % int(settings.SANDBOX_UID_COUNT)


def prepare_workspace(tenant_id: UUID, session_id: UUID) -> Path:
    """The session's workspace, created on first use, with an empty ``output/`` for this call."""
    workspace = session_workspace_path(tenant_id, session_id)
    for folder in (sandbox_root(), workspace.parent):
        folder.mkdir(mode=SHARED_FOLDER_MODE, parents=True, exist_ok=True)
    uid = sandbox_uid_for(session_id)
    if not workspace.is_dir():
        workspace.mkdir(mode=SESSION_FOLDER_MODE, exist_ok=True)
        give_to_sandbox(workspace, uid)
    give_to_sandbox(replace_with_empty_folder(workspace / OUTPUT_FOLDER), uid)
    return workspace


def replace_with_empty_folder(path: Path) -> Path:
    remove_without_following(path)
    path.mkdir()
    return path


def remove_without_following(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)  # rmtree unlinks symlinks inside, never their targets


def give_to_sandbox(path: Path, uid: int | None) -> None:
    if uid is not None:
        os.lchown(path, uid, uid)


def write_code_file(workspace: Path, name: str, code: str, uid: int | None) -> str:
    """Writes the code under ``.code/`` and returns its path as the sandbox sees it."""
    write_fresh_folder(workspace / CODE_FOLDER, [(name, code.encode("utf-8"))], uid)
    return f"/workspace/{CODE_FOLDER}/{name}"


def place_attachments(workspace: Path, files: list[tuple[str, bytes]], uid: int | None) -> list[str]:
    """The session's attached files under ``attachments/``; returns the names as placed."""
    names = distinct_names([name for name, _data in files])
    placed = [(name, data) for name, (_given, data) in zip(names, files, strict=True)]
    write_fresh_folder(workspace / ATTACHMENTS_FOLDER, placed, uid)
    return names


def distinct_names(names: list[str]) -> list[str]:
    """File names safe in one folder: no path parts, a second "a.csv" becomes "a (2).csv"."""
    placed: list[str] = []
    for raw in names:
        name = raw.replace("/", "_").replace("\\", "_").lstrip(".") or "file"
        stem, dot, extension = name.rpartition(".")
        candidate, number = name, 2
        while candidate in placed:
            candidate = f"{stem} ({number}).{extension}" if dot and stem else f"{name} ({number})"
            number += 1
        placed.append(candidate)
    return placed


def write_fresh_folder(folder: Path, files: list[tuple[str, bytes]], uid: int | None) -> None:
    """Replaces ``folder`` with one holding ``files``, given to the sandbox's uid.

    Each file is opened through the folder's descriptor: a link the code swapped in for the
    folder is never followed.
    """
    replace_with_empty_folder(folder)
    give_to_sandbox(folder, uid)
    folder_descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for name, data in files:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
            descriptor = os.open(name, flags, 0o644, dir_fd=folder_descriptor)
            if uid is not None:
                os.fchown(descriptor, uid, uid)
            with os.fdopen(descriptor, "wb") as file:
                file.write(data)
    finally:
        os.close(folder_descriptor)


def workspace_size(workspace: Path) -> int:
    """Bytes of the files in the workspace, links not followed."""
    total = 0
    for folder, _folders, files in os.walk(workspace):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                continue
    return total


def remove_session_workspace(tenant_id: UUID, session_id: UUID) -> None:
    workspace = session_workspace_path(tenant_id, session_id)
    if workspace.is_dir() and not workspace.is_symlink():
        shutil.rmtree(workspace)
