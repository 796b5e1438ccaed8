"""One workspace per session, kept between its ``code_run`` calls.

``<SANDBOX_ROOT>/<tenant_id>/<session_id>/`` holds the saved workspace. The sandbox never
writes it: each call copies it into a tmpfs the size of the workspace limit, and the worker
replaces it with what the sandbox hands back (``tools/sandbox/handback.py``). Beside it,
``<session_id>.inputs/`` holds the call's code and attachments (bound read-only), and
``<session_id>.incoming/`` the workspace being handed back.
"""

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from uuid import UUID

from django.conf import settings

from tools.sandbox.handback import PAGE_BYTES

OUTPUT_FOLDER = "output"
CODE_FOLDER = ".code"
# The session's attached files, written afresh for each call and bound read-only there.
ATTACHMENTS_FOLDER = "attachments"
# Traversable but not listable: one sandbox uid cannot enumerate the others' sessions.
SHARED_FOLDER_MODE = 0o711
SESSION_FOLDER_MODE = 0o700


@dataclass(frozen=True)
class WorkspaceFolders:
    saved: Path  # copied into /workspace at the start of the call
    code: Path  # bound read-only at /workspace/.code
    attachments: Path  # bound read-only at /workspace/attachments
    incoming: Path  # receives the workspace the call leaves


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


def prepare_workspace(tenant_id: UUID, session_id: UUID) -> WorkspaceFolders:
    """The session's folders, created on first use, with ``output/`` and the inputs empty for this call."""
    workspace = session_workspace_path(tenant_id, session_id)
    for folder in (sandbox_root(), workspace.parent):
        folder.mkdir(mode=SHARED_FOLDER_MODE, parents=True, exist_ok=True)
    uid = sandbox_uid_for(session_id)
    folders = folders_for(workspace)
    restore_interrupted_swap(workspace)
    for path in (workspace, folders.code.parent):
        if not path.is_dir():
            path.mkdir(mode=SESSION_FOLDER_MODE, exist_ok=True)
            give_to_sandbox(path, uid)
    # Workspaces saved before the call's inputs moved beside them still hold a copy of those.
    for legacy_input in (CODE_FOLDER, ATTACHMENTS_FOLDER):
        remove_without_following(workspace / legacy_input)
    for empty in (workspace / OUTPUT_FOLDER, folders.code, folders.attachments):
        give_to_sandbox(replace_with_empty_folder(empty), uid)
    replace_with_empty_folder(folders.incoming).chmod(SESSION_FOLDER_MODE)
    return folders


def folders_for(workspace: Path) -> WorkspaceFolders:
    inputs = workspace.with_name(f"{workspace.name}.inputs")
    return WorkspaceFolders(
        saved=workspace,
        code=inputs / "code",
        attachments=inputs / "attachments",
        incoming=workspace.with_name(f"{workspace.name}.incoming"),
    )


def previous_path(workspace: Path) -> Path:
    return workspace.with_name(f"{workspace.name}.previous")


def restore_interrupted_swap(workspace: Path) -> None:
    """A worker that died between the two renames of ``keep_incoming`` left the old workspace aside."""
    previous = previous_path(workspace)
    if not workspace.exists() and previous.is_dir():
        previous.rename(workspace)
    remove_without_following(previous)


def keep_incoming(folders: WorkspaceFolders, uid: int | None) -> None:
    """The handed-back workspace becomes the saved one; the old one is removed."""
    give_tree_to_sandbox(folders.incoming, uid)
    previous = previous_path(folders.saved)
    folders.saved.rename(previous)
    folders.incoming.rename(folders.saved)
    shutil.rmtree(previous)


def discard_incoming(folders: WorkspaceFolders) -> None:
    remove_without_following(folders.incoming)


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


def give_tree_to_sandbox(root: Path, uid: int | None) -> None:
    """The worker extracted it (as root, owned by root): the sandbox's uid must read it."""
    if uid is None:
        return
    give_to_sandbox(root, uid)
    for folder, folders, files in os.walk(root):
        for name in folders + files:
            give_to_sandbox(Path(folder) / name, uid)


def write_code_file(folders: WorkspaceFolders, name: str, code: str, uid: int | None) -> str:
    """Writes the code for ``.code/`` and returns its path as the sandbox sees it."""
    write_fresh_folder(folders.code, [(name, code.encode("utf-8"))], uid)
    return f"/workspace/{CODE_FOLDER}/{name}"


def place_attachments(
    folders: WorkspaceFolders, files: list[tuple[str, bytes]], uid: int | None
) -> list[str]:
    """The session's attached files for ``attachments/``; returns the names as placed."""
    names = distinct_names([name for name, _data in files])
    placed = [(name, data) for name, (_given, data) in zip(names, files, strict=True)]
    write_fresh_folder(folders.attachments, placed, uid)
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
    """Bytes the workspace's files take in the sandbox's tmpfs (whole pages), links not followed."""
    total = 0
    for folder, _folders, files in os.walk(workspace):
        for name in files:
            try:
                status = os.lstat(os.path.join(folder, name))
            except FileNotFoundError:
                continue
            if S_ISREG(status.st_mode):
                total += -(-status.st_size // PAGE_BYTES) * PAGE_BYTES
    return total


def remove_session_workspace(tenant_id: UUID, session_id: UUID) -> None:
    workspace = session_workspace_path(tenant_id, session_id)
    folders = folders_for(workspace)
    for path in (workspace, folders.code.parent, folders.incoming, previous_path(workspace)):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
