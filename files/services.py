"""Writes to files and knowledge bases: uploads (checked before anything is stored),
deletion, knowledge bases and their documents.

An upload is refused whole, with a clear 4xx, when it is empty, over a limit, or not a kind
of file Agentry reads; nothing of it is stored then. A document that is accepted is
extracted in the background (``files.tasks``) and ends ``ready`` or ``failed`` with a reason.
"""

import hashlib
import os
import unicodedata
from collections.abc import Callable, Iterable
from typing import IO, Any, BinaryIO, cast
from uuid import UUID

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.files import File
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Sum
from rest_framework import exceptions, status

from agents.models import Agent
from audit.models import AuditAction
from audit.services import audit_record, audit_values
from files.images import image_dimensions
from files.models import FilePurpose, FileStatus, KnowledgeBase, KnowledgeDocument, StoredFile
from files.sniffing import UnsupportedFile, detect_file_content_type, is_image
from sessions.models import Session
from tenants.actors import Actor
from tenants.models import Role, Tenant

MAX_NAME_CHARACTERS = 255
HASH_BLOCK_BYTES = 1024 * 1024
KNOWLEDGE_BASE_FIELDS = ("name", "description", "agent_ids")


class FileTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "file_too_large"
    default_detail = "The file is larger than allowed."


class UnsupportedFileType(exceptions.APIException):
    status_code = status.HTTP_415_UNSUPPORTED_MEDIA_TYPE
    default_code = "unsupported_file_type"
    default_detail = "Agentry cannot read this kind of file."


def _require_role(actor: Actor, role: str) -> None:
    if not actor.can(role):
        raise PermissionDenied(f"needs the {role} role")


def clean_file_name(raw: str) -> str:
    """The name as people see it: no folders, no control characters, at most 255 characters."""
    name = os.path.basename(raw.replace("\\", "/"))
    name = "".join(character for character in name if unicodedata.category(character)[0] != "C").strip()
    if len(name) > MAX_NAME_CHARACTERS:
        stem, extension = os.path.splitext(name)
        name = stem[: MAX_NAME_CHARACTERS - len(extension[:20])] + extension[:20]
    return name or "unnamed"


def sha256_of(upload: IO[bytes]) -> str:
    digest = hashlib.sha256()
    upload.seek(0)
    for block in iter(lambda: upload.read(HASH_BLOCK_BYTES), b""):
        digest.update(block)
    upload.seek(0)
    return digest.hexdigest()


def check_file_size(*, tenant_id: UUID, size: int) -> None:
    """Refuse an empty file, one over the upload limit, and one the team has no room left for."""
    if size == 0:
        raise ValidationError({"file": ["The file is empty."]})
    limit = settings.FILES_MAX_UPLOAD_BYTES
    if size > limit:
        raise FileTooLarge(f"The file is {size:,} bytes; the largest upload is {limit:,} bytes.")
    _check_tenant_room(tenant_id=tenant_id, size=size)


def _check_tenant_room(*, tenant_id: UUID, size: int) -> None:
    stored = StoredFile.objects.filter(tenant_id=tenant_id).aggregate(total=Sum("size"))["total"] or 0
    room = settings.FILES_MAX_TENANT_BYTES - stored
    if size > room:
        raise FileTooLarge(
            f"This team's files would take {stored + size:,} bytes; the limit is "
            f"{settings.FILES_MAX_TENANT_BYTES:,} bytes. Delete files to make room."
        )


def _lock_tenant_file_quota(tenant_id: UUID) -> None:
    """Held until the commit: one file of a tenant at a time is counted against its room and
    inserted, so concurrent uploads cannot each see the same room. NO KEY UPDATE leaves the
    row free for the inserts that only reference the tenant."""
    Tenant.objects.select_for_update(no_key=True).filter(pk=tenant_id).values_list("id", flat=True).first()


def _detected_type(upload: UploadedFile, name: str) -> str:
    try:
        return detect_file_content_type(cast(BinaryIO, upload), name)
    except UnsupportedFile as error:
        raise UnsupportedFileType(f"{name}: {error.reason}") from error
    finally:
        upload.seek(0)


def file_upload(
    *, actor: Actor, upload: UploadedFile, purpose: str, session: Session | None = None
) -> StoredFile:
    """Check and store an upload; a document is queued for extraction, an image is ready at once."""
    if purpose == FilePurpose.ATTACHMENT:
        if session is None:
            raise ValidationError({"session": ["Attachments belong to a session."]})
        _require_session_poster(actor, session)
    name = clean_file_name(upload.name or "")
    check_file_size(tenant_id=actor.tenant.pk, size=upload.size or 0)
    content_type = _detected_type(upload, name)
    stored = StoredFile(
        tenant=actor.tenant,
        purpose=purpose,
        session=session,
        uploaded_by=actor.user,
        name=name,
        content_type=content_type,
        size=upload.size or 0,
        sha256=sha256_of(upload),
    )
    if is_image(content_type):
        stored.width, stored.height = _checked_image_size(upload, name)
        stored.status = FileStatus.READY

    def queue_document() -> None:
        if stored.status == FileStatus.QUEUED:
            transaction.on_commit(lambda: _queue_processing(stored.pk))

    return stored_file_save(stored=stored, content=upload, in_transaction=queue_document)


def stored_file_save(
    *, stored: StoredFile, content: IO[bytes], in_transaction: Callable[[], None] | None = None
) -> StoredFile:
    """Write the bytes to the default storage, then insert the row (with ``in_transaction``'s
    writes in its transaction) if the tenant still has room for it (FileTooLarge otherwise);
    when the insert fails, the bytes are deleted again."""
    stored.blob.save(stored.name, content if isinstance(content, File) else File(content), save=False)
    try:
        with transaction.atomic():
            _lock_tenant_file_quota(stored.tenant_id)
            _check_tenant_room(tenant_id=stored.tenant_id, size=stored.size)
            stored.save(force_insert=True)
            if in_transaction is not None:
                in_transaction()
    except Exception:
        stored.blob.delete(save=False)  # the row is not there: neither are the bytes
        raise
    return stored


def _checked_image_size(upload: UploadedFile, name: str) -> tuple[int, int]:
    try:
        return image_dimensions(upload)
    except UnsupportedFile as error:
        raise UnsupportedFileType(f"{name}: {error.reason}") from error
    finally:
        upload.seek(0)


def _queue_processing(file_id: UUID) -> None:
    from files.tasks import queue_file_processing

    queue_file_processing(file_id)


def _require_session_poster(actor: Actor, session: Session) -> None:
    """Who may post to a session may attach files to it: its creator, or an admin."""
    if session.tenant_id != actor.tenant.pk:
        raise PermissionDenied("another tenant's session")
    if session.created_by_id != actor.user_id and not actor.can(Role.ADMIN):
        raise PermissionDenied("only the session's creator or an admin may attach files")


def file_delete(*, actor: Actor, stored: StoredFile) -> None:
    """Its chunks and citations go with it (cascade), its bytes after the commit (files.signals)."""
    if stored.purpose == FilePurpose.KNOWLEDGE:
        _require_role(actor, Role.ADMIN)
    elif stored.uploaded_by_id != actor.user_id and not actor.can(Role.ADMIN):
        raise PermissionDenied("only who uploaded the file or an admin may delete it")
    with transaction.atomic():
        # Locked first, as an extraction locks it to store the file's chunks: either those
        # chunks are in and go with the file, or the extraction finds the file gone.
        StoredFile.objects.select_for_update().filter(pk=stored.pk).values_list("id", flat=True).first()
        stored.delete()


def attachments_for_message(*, session: Session, file_ids: Iterable[UUID]) -> list[StoredFile]:
    """The session's own files, in the order given; anything else is a field error."""
    wanted = list(dict.fromkeys(file_ids))
    if not wanted:
        return []
    found = {
        stored.pk: stored
        for stored in StoredFile.objects.filter(
            tenant_id=session.tenant_id, session=session, purpose=FilePurpose.ATTACHMENT, pk__in=wanted
        )
    }
    missing = [str(file_id) for file_id in wanted if file_id not in found]
    if missing:
        raise ValidationError(
            {"attachments": [f"No file {file_id} was uploaded to this session." for file_id in missing]}
        )
    failed = [found[file_id].name for file_id in wanted if found[file_id].status == FileStatus.FAILED]
    if failed:
        raise ValidationError({"attachments": [f"{name} could not be read; remove it." for name in failed]})
    return [found[file_id] for file_id in wanted]


def attachment_block(stored: StoredFile) -> dict[str, Any]:
    """How a message stores an attached file: a reference, resolved into the model's context per run."""
    return {
        "type": "attachment",
        "file_id": str(stored.pk),
        "name": stored.name,
        "content_type": stored.content_type,
        "size": stored.size,
    }


# --- Knowledge bases -----------------------------------------------------------------------------


def _tenant_agents(actor: Actor, agent_ids: Iterable[UUID]) -> list[Agent]:
    wanted = list(dict.fromkeys(agent_ids))
    agents = list(Agent.objects.filter(tenant=actor.tenant, pk__in=wanted))
    if len(agents) != len(wanted):
        found = {agent.pk for agent in agents}
        raise ValidationError(
            {
                "agent_ids": [
                    f"No agent {agent_id} in this team." for agent_id in wanted if agent_id not in found
                ]
            }
        )
    return agents


def _knowledge_base_values(knowledge_base: KnowledgeBase) -> dict[str, Any]:
    values = audit_values(knowledge_base, ("name", "description"))
    values["agent_ids"] = sorted(str(pk) for pk in knowledge_base.agents.values_list("pk", flat=True))
    return values


def _validated_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise ValidationError({"name": ["Name cannot be empty."]})
    return name


def knowledge_base_create(
    *, actor: Actor, name: str, description: str = "", agent_ids: Iterable[UUID] = ()
) -> KnowledgeBase:
    _require_role(actor, Role.ADMIN)
    knowledge_base = KnowledgeBase(
        tenant=actor.tenant, name=_validated_name(name), description=description, created_by=actor.user
    )
    agents = _tenant_agents(actor, agent_ids)
    with transaction.atomic():
        _save_unique(knowledge_base)
        knowledge_base.agents.set(agents)
        audit_record(
            tenant=actor.tenant,
            action=AuditAction.CREATE,
            object_type="knowledge_base",
            object_id=knowledge_base.pk,
            object_label=knowledge_base.name,
            after=_knowledge_base_values(knowledge_base),
        )
    return knowledge_base


def knowledge_base_update(*, actor: Actor, knowledge_base: KnowledgeBase, **changes: Any) -> KnowledgeBase:
    _require_role(actor, Role.ADMIN)
    unknown = set(changes) - set(KNOWLEDGE_BASE_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
    before = _knowledge_base_values(knowledge_base)
    if "name" in changes:
        knowledge_base.name = _validated_name(changes["name"])
    if "description" in changes:
        knowledge_base.description = changes["description"]
    agents = _tenant_agents(actor, changes["agent_ids"]) if "agent_ids" in changes else None
    with transaction.atomic():
        _save_unique(knowledge_base)
        if agents is not None:
            knowledge_base.agents.set(agents)
        audit_record(
            tenant=actor.tenant,
            action=AuditAction.UPDATE,
            object_type="knowledge_base",
            object_id=knowledge_base.pk,
            object_label=knowledge_base.name,
            before=before,
            after=_knowledge_base_values(knowledge_base),
        )
    return knowledge_base


def _save_unique(knowledge_base: KnowledgeBase) -> None:
    try:
        with transaction.atomic():
            knowledge_base.save()
    except IntegrityError as error:
        raise ValidationError({"name": ["A knowledge base with this name already exists."]}) from error


def knowledge_base_delete(*, actor: Actor, knowledge_base: KnowledgeBase) -> None:
    """With its documents and their files."""
    _require_role(actor, Role.ADMIN)
    files = list(StoredFile.objects.filter(knowledge_document__knowledge_base=knowledge_base))
    with transaction.atomic():
        audit_record(
            tenant=actor.tenant,
            action=AuditAction.DELETE,
            object_type="knowledge_base",
            object_id=knowledge_base.pk,
            object_label=knowledge_base.name,
            before=_knowledge_base_values(knowledge_base),
        )
        knowledge_base.delete()
        for stored in files:
            file_delete(actor=actor, stored=stored)


def knowledge_document_add(
    *, actor: Actor, knowledge_base: KnowledgeBase, upload: UploadedFile
) -> KnowledgeDocument:
    _require_role(actor, Role.ADMIN)
    with transaction.atomic():
        stored = file_upload(actor=actor, upload=upload, purpose=FilePurpose.KNOWLEDGE)
        if stored.is_image:
            stored.blob.delete(save=False)
            raise UnsupportedFileType(
                f"{stored.name}: knowledge bases hold documents to search; "
                "attach images to a message instead."
            )
        try:
            return KnowledgeDocument.objects.create(
                tenant=actor.tenant, knowledge_base=knowledge_base, file=stored, added_by=actor.user
            )
        except Exception:
            stored.blob.delete(save=False)
            raise
