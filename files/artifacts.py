"""Artifacts: files a tool made during a run (``code_run``'s output folder, ``file_write``),
stored as ``StoredFile`` rows of the run's session, downloadable through the files API.

An artifact is never refused for its kind: what Agentry cannot show is kept as
``application/octet-stream``, for download only. A file over a limit is skipped with a reason
the model can pass on, and the tool still succeeds. Each stored artifact is announced with an
``artifact.created`` event, so the chat shows it while the run goes on.
"""

import io
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, BinaryIO, cast
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Max

from files.images import image_dimensions
from files.models import FilePurpose, FileStatus, StoredFile
from files.services import FileTooLarge, check_file_size, clean_file_name, sha256_of, stored_file_save
from files.sniffing import UnsupportedFile, detect_file_content_type, is_image
from sessions.events import emit_event
from sessions.models import Message, MessageRole
from tools.builtins.base import ToolContext

# The most files one tool call keeps: a loop that writes thousands must not fill the team's storage.
MAX_ARTIFACTS_PER_CALL = 20
OCTET_STREAM = "application/octet-stream"


class ArtifactSkipped(Exception):
    """The file is not kept; ``reason`` says why, for the model and the person it works for."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def artifact_data(stored: StoredFile) -> dict[str, Any]:
    """An artifact as tool results, the API, the events and the chat carry it."""
    return {
        "file_id": str(stored.pk),
        "name": stored.name,
        "content_type": stored.content_type,
        "size": stored.size,
        "download_url": f"/api/v1/files/{stored.pk}/download/",
    }


def store_artifacts(context: ToolContext, outputs: list[tuple[str, Path]]) -> list[dict[str, Any]]:
    """Keep each output file (its name as the tool gave it, its path on this host) as an artifact.

    Each entry of the answer is ``artifact_data`` of a stored file, or ``{"name", "skipped"}``
    with the reason a file was not kept.
    """
    results: list[dict[str, Any]] = []
    for index, (name, path) in enumerate(outputs):
        try:
            if index >= MAX_ARTIFACTS_PER_CALL:
                raise ArtifactSkipped(f"only the first {MAX_ARTIFACTS_PER_CALL} files of a call are kept")
            with _opened_regular_file(path) as (fileobj, size):
                stored = store_artifact(context, name=name, content=fileobj, size=size)
        except ArtifactSkipped as skipped:
            results.append({"name": clean_file_name(name), "skipped": skipped.reason})
            continue
        results.append(artifact_data(stored))
    return results


@contextmanager
def _opened_regular_file(path: Path) -> Iterator[tuple[BinaryIO, int]]:
    """The file and its size, refusing links and devices.

    The path is in a folder the sandboxed code controls: following a symbolic link there
    would read whatever file of the host it points to.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise ArtifactSkipped(f"the file could not be read ({error.strerror})") from error
    status = os.fstat(descriptor)
    if not stat.S_ISREG(status.st_mode):
        os.close(descriptor)
        raise ArtifactSkipped("not a regular file (a folder, link or device)")
    with os.fdopen(descriptor, "rb") as fileobj:
        yield fileobj, status.st_size


def store_artifact(context: ToolContext, *, name: str, content: IO[bytes], size: int) -> StoredFile:
    """Store one file as an artifact of the context's run and announce it; ArtifactSkipped otherwise."""
    name = clean_file_name(name)
    _check_room(context.tenant_id, size)
    content_type, dimensions = _artifact_type(content, name)
    stored = StoredFile(
        tenant_id=context.tenant_id,
        purpose=FilePurpose.ARTIFACT,
        session_id=context.session_id,
        run_id=context.run_id,
        tool_call_id=context.tool_call_id,
        uploaded_by_id=context.user_id,
        name=name,
        content_type=content_type,
        size=size,
        sha256=sha256_of(content),
        status=FileStatus.READY,
    )
    if dimensions is not None:
        stored.width, stored.height = dimensions

    def announce() -> None:
        emit_event(
            session_id=context.session_id,
            run_id=context.run_id,
            event_type="artifact.created",
            data={
                **artifact_data(stored),
                "run_id": str(context.run_id),
                "tool_call_id": context.tool_call_id,
            },
        )

    try:
        return stored_file_save(stored=stored, content=content, in_transaction=announce)
    except FileTooLarge as error:  # another file took the room since _check_room
        raise ArtifactSkipped(str(error.detail)) from error


def store_text_artifact(context: ToolContext, *, name: str, text: str) -> StoredFile:
    """A text a tool wrote (``file_write``), kept as an artifact like a file."""
    data = text.encode("utf-8")
    return store_artifact(context, name=name, content=io.BytesIO(data), size=len(data))


def _check_room(tenant_id: UUID, size: int) -> None:
    try:
        check_file_size(tenant_id=tenant_id, size=size)
    except ValidationError as error:
        raise ArtifactSkipped(" ".join(error.messages)) from error
    except FileTooLarge as error:
        raise ArtifactSkipped(str(error.detail)) from error


def _artifact_type(content: IO[bytes], name: str) -> tuple[str, tuple[int, int] | None]:
    """The type told from the bytes, with an image's size; what Agentry cannot show is a download."""
    try:
        content_type = detect_file_content_type(cast(BinaryIO, content), name)
        if is_image(content_type):
            return content_type, image_dimensions(content)
    except UnsupportedFile:
        return OCTET_STREAM, None
    return content_type, None


# --- Reads -------------------------------------------------------------------------------------


def artifacts_by_run(run_ids: Iterable[UUID]) -> dict[UUID, list[StoredFile]]:
    """The artifacts of these runs, oldest first (one query; none for no runs)."""
    by_run: dict[UUID, list[StoredFile]] = {}
    run_ids = set(run_ids)
    if not run_ids:
        return by_run
    artifacts = StoredFile.objects.filter(run_id__in=run_ids, purpose=FilePurpose.ARTIFACT).defer("text")
    for stored in artifacts.order_by("created_at", "id"):
        assert stored.run_id is not None
        by_run.setdefault(stored.run_id, []).append(stored)
    return by_run


def artifacts_by_message(messages: Iterable[Message]) -> dict[UUID, list[dict[str, Any]]]:
    """The artifacts each answer lists: a run's last assistant message lists all the run's artifacts.

    At most two queries, and one when none of the messages' runs made an artifact.
    """
    answers = [m for m in messages if m.role == MessageRole.ASSISTANT and m.run_id is not None]
    by_run = artifacts_by_run(m.run_id for m in answers if m.run_id is not None)
    if not by_run:
        return {}
    last_positions = dict(
        Message.objects.filter(run_id__in=by_run, role=MessageRole.ASSISTANT, position__isnull=False)
        .values("run_id")
        .annotate(last=Max("position"))
        .values_list("run_id", "last")
    )
    return {
        message.pk: [artifact_data(stored) for stored in by_run[message.run_id]]
        for message in answers
        if message.run_id in by_run and message.position == last_positions.get(message.run_id)
    }
