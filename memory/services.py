"""Writes to memories: people's edits and reviews, the agent's saves, extracted suggestions.

Each write embeds the content when a backend is configured; the full-text index follows
by itself (``memory.fulltext``). Review decisions are conditional updates, so two people
deciding at once cannot both win.
"""

from typing import Any
from uuid import UUID

from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from agents.models import Agent
from memory.conf import memory_setting
from memory.embeddings import embed_or_none, embedding_backend
from memory.fulltext import MemoryScope
from memory.models import MAX_MEMORY_CHARACTERS, Memory, MemorySource, MemoryStatus, MemoryType
from memory.retrieval import find_near_duplicate
from tenants.actors import Actor
from tenants.models import Membership, Role

EDITABLE_FIELDS = ("content", "type", "importance", "status", "subject_user_id")
# People may archive and restore memories by editing; suggestions go through approve/reject.
EDITABLE_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.ARCHIVED)
REVIEWABLE_STATUSES = (MemoryStatus.SUGGESTED, MemoryStatus.REJECTED)
COUNTED_STATUSES = (MemoryStatus.ACTIVE, MemoryStatus.SUGGESTED)


class MemoryLimitReached(ValidationError):
    """The agent holds ``MEMORY_MAX_PER_AGENT`` active and suggested memories already."""


def _require_admin(actor: Actor) -> None:
    if not actor.can(Role.ADMIN):
        raise PermissionDenied("Your role does not allow this action.")


def clean_content(content: str) -> str:
    content = content.strip()
    if not content:
        raise ValidationError({"content": ["A memory cannot be empty."]})
    if len(content) > MAX_MEMORY_CHARACTERS:
        raise ValidationError(
            {"content": [f"Ensure this field has no more than {MAX_MEMORY_CHARACTERS} characters."]}
        )
    return content


def _validate_fields(*, type: str, importance: float) -> None:
    errors: dict[str, list[str]] = {}
    if type not in MemoryType.values:
        errors["type"] = [f"Choose one of {', '.join(MemoryType.values)}."]
    if isinstance(importance, bool) or not isinstance(importance, int | float) or not 0 <= importance <= 1:
        errors["importance"] = ["Must be a number between 0 and 1."]
    if errors:
        raise ValidationError(errors)


def _validate_subject(*, tenant_id: UUID, subject_user_id: int | None) -> None:
    if subject_user_id is None:
        return
    if not Membership.objects.filter(tenant_id=tenant_id, user_id=subject_user_id).exists():
        raise ValidationError({"subject_user": ["Not a member of this workspace."]})


def _require_room(agent_id: UUID) -> None:
    limit = int(memory_setting("MEMORY_MAX_PER_AGENT"))
    if Memory.objects.filter(agent_id=agent_id, status__in=COUNTED_STATUSES).count() >= limit:
        raise MemoryLimitReached(
            {
                "non_field_errors": [
                    f"This agent already holds {limit} memories; archive or delete some first."
                ]
            }
        )


def embedding_fields(content: str) -> dict[str, Any]:
    """The embedding columns for ``content``: empty when no backend is configured or it failed."""
    backend = embedding_backend()
    vectors = embed_or_none(backend, [content]) if backend is not None else None
    if backend is None or vectors is None:
        return {"embedding": None, "embedding_model": ""}
    return {"embedding": vectors[0], "embedding_model": backend.name}


def _create(
    *,
    tenant_id: UUID,
    agent_id: UUID,
    content: str,
    type: str,
    importance: float,
    source: str,
    status: str,
    subject_user_id: int | None = None,
    source_session_id: UUID | None = None,
    created_by_id: int | None = None,
) -> Memory:
    content = clean_content(content)
    _validate_fields(type=type, importance=importance)
    _require_room(agent_id)
    return Memory.objects.create(
        tenant_id=tenant_id,
        agent_id=agent_id,
        subject_user_id=subject_user_id,
        type=type,
        content=content,
        importance=float(importance),
        source=source,
        status=status,
        source_session_id=source_session_id,
        created_by_id=created_by_id,
        **embedding_fields(content),
    )


def memory_create(
    *,
    actor: Actor,
    agent: Agent,
    content: str,
    type: str = MemoryType.FACT,
    importance: float = 0.5,
    subject_user_id: int | None = None,
) -> Memory:
    """A memory a person enters: active at once."""
    _require_admin(actor)
    if agent.tenant_id != actor.tenant.pk:
        raise PermissionDenied("The agent belongs to another workspace.")
    _validate_subject(tenant_id=actor.tenant.pk, subject_user_id=subject_user_id)
    return _create(
        tenant_id=actor.tenant.pk,
        agent_id=agent.pk,
        content=content,
        type=type,
        importance=importance,
        source=MemorySource.MANUAL,
        status=MemoryStatus.ACTIVE,
        subject_user_id=subject_user_id,
        created_by_id=actor.user_id,
    )


def memory_update(*, actor: Actor, memory: Memory, **fields: Any) -> Memory:
    _require_admin(actor)
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
    is_status_change = "status" in fields and fields["status"] != memory.status
    if is_status_change and (
        fields["status"] not in EDITABLE_STATUSES or memory.status not in EDITABLE_STATUSES
    ):
        raise ValidationError(
            {"status": ["Edits may archive or restore a memory; review suggestions with approve or reject."]}
        )
    if "subject_user_id" in fields:
        _validate_subject(tenant_id=memory.tenant_id, subject_user_id=fields["subject_user_id"])
    if "content" in fields:
        fields["content"] = clean_content(fields["content"])
    _validate_fields(
        type=fields.get("type", memory.type), importance=fields.get("importance", memory.importance)
    )
    if "content" in fields and fields["content"] != memory.content:
        fields.update(embedding_fields(fields["content"]))
    for name, value in fields.items():
        setattr(memory, name, value)
    memory.save()
    return memory


def memory_approve(
    *,
    actor: Actor,
    memory: Memory,
    content: str | None = None,
    importance: float | None = None,
    type: str | None = None,
) -> Memory:
    """Make a suggestion (or a rejected one, on second thought) active, optionally edited first."""
    _require_admin(actor)
    changes: dict[str, Any] = {}
    if content is not None:
        changes["content"] = clean_content(content)
    if importance is not None:
        changes["importance"] = float(importance)
    if type is not None:
        changes["type"] = type
    _validate_fields(
        type=changes.get("type", memory.type), importance=changes.get("importance", memory.importance)
    )
    if "content" in changes and changes["content"] != memory.content:
        changes.update(embedding_fields(changes["content"]))
    return _review(
        actor=actor, memory=memory, status=MemoryStatus.ACTIVE, allowed=REVIEWABLE_STATUSES, **changes
    )


def memory_reject(*, actor: Actor, memory: Memory) -> Memory:
    _require_admin(actor)
    return _review(
        actor=actor, memory=memory, status=MemoryStatus.REJECTED, allowed=(MemoryStatus.SUGGESTED,)
    )


def _review(*, actor: Actor, memory: Memory, status: str, allowed: tuple[str, ...], **changes: Any) -> Memory:
    now = timezone.now()
    updated = Memory.objects.filter(pk=memory.pk, status__in=allowed).update(
        status=status, reviewed_by_id=actor.user_id, reviewed_at=now, updated_at=now, **changes
    )
    if not updated:
        memory.refresh_from_db(fields=["status"])
        raise ValidationError(
            {"status": [f"This memory is {memory.status}; only {' or '.join(allowed)} ones can be."]}
        )
    memory.refresh_from_db()
    return memory


def memory_delete(*, actor: Actor, memory: Memory) -> None:
    """Gone for good, with its index entry (people may want something truly forgotten)."""
    _require_admin(actor)
    memory.delete()


def memory_save_from_agent(
    *,
    tenant_id: UUID,
    agent_id: UUID,
    content: str,
    type: str,
    importance: float,
    subject_user_id: int | None,
    source_session_id: UUID | None,
    created_by_id: int | None,
) -> tuple[Memory, bool]:
    """What an agent decided to remember: active at once. Returns (memory, created).

    Saying again what an active memory already says keeps that memory (raising its
    importance to the higher of the two) instead of storing a duplicate.
    """
    content = clean_content(content)
    scope = MemoryScope(
        tenant_id=tenant_id,
        agent_id=agent_id,
        statuses=(MemoryStatus.ACTIVE,),
        subject_user_id=subject_user_id,
        include_general=subject_user_id is None,
    )
    duplicate = find_near_duplicate(scope=scope, content=content)
    if duplicate is not None:
        _validate_fields(type=type, importance=importance)
        if importance > duplicate.importance:
            Memory.objects.filter(pk=duplicate.pk).update(
                importance=float(importance), updated_at=timezone.now()
            )
            duplicate.refresh_from_db()
        return duplicate, False
    memory = _create(
        tenant_id=tenant_id,
        agent_id=agent_id,
        content=content,
        type=type,
        importance=importance,
        source=MemorySource.AGENT,
        status=MemoryStatus.ACTIVE,
        subject_user_id=subject_user_id,
        source_session_id=source_session_id,
        created_by_id=created_by_id,
    )
    return memory, True


def memory_suggest(
    *,
    tenant_id: UUID,
    agent_id: UUID,
    content: str,
    type: str,
    importance: float,
    subject_user_id: int | None,
    source_session_id: UUID,
) -> Memory | None:
    """Store an extracted memory as a suggestion, unless the agent already has (or had) it.

    Rejected and archived memories count too: what a person turned down is not proposed again.
    """
    scope = MemoryScope(
        tenant_id=tenant_id,
        agent_id=agent_id,
        statuses=tuple(MemoryStatus.values),
        subject_user_id=subject_user_id,
    )
    if find_near_duplicate(scope=scope, content=content) is not None:
        return None
    return _create(
        tenant_id=tenant_id,
        agent_id=agent_id,
        content=content,
        type=type,
        importance=importance,
        source=MemorySource.EXTRACTED,
        status=MemoryStatus.SUGGESTED,
        subject_user_id=subject_user_id,
        source_session_id=source_session_id,
    )


def memory_archive_for_agent(*, scope: MemoryScope, memory_id: UUID) -> Memory | None:
    """Archive a memory the agent can see (``scope``); None when it sees no such memory."""
    now = timezone.now()
    updated = Memory.objects.filter(scope.condition(), pk=memory_id).update(
        status=MemoryStatus.ARCHIVED, updated_at=now
    )
    return Memory.objects.filter(pk=memory_id).first() if updated else None
