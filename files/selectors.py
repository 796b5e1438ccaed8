"""Reads of files and knowledge bases, always within the actor's tenant: another tenant's
file, document or knowledge base is a 404, exactly like a missing one."""

from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.http import Http404

from agents.models import Agent
from files.models import FilePurpose, KnowledgeBase, KnowledgeDocument, StoredFile
from sessions.models import Session
from tenants.actors import Actor


def _uuid_or_404(value: UUID | str) -> UUID:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except (ValueError, ValidationError) as error:
        raise Http404("not found") from error


def file_list_for_actor(*, actor: Actor) -> QuerySet[StoredFile]:
    return StoredFile.objects.filter(tenant=actor.tenant).select_related("knowledge_document").defer("text")


def file_get_for_actor(*, actor: Actor, file_id: UUID | str) -> StoredFile:
    try:
        return file_list_for_actor(actor=actor).get(pk=_uuid_or_404(file_id))
    except StoredFile.DoesNotExist as error:
        raise Http404("file not found") from error


def knowledge_base_list_for_actor(*, actor: Actor) -> QuerySet[KnowledgeBase]:
    agents = Agent.objects.filter(tenant=actor.tenant).only("id", "name")
    return (
        KnowledgeBase.objects.filter(tenant=actor.tenant)
        .annotate(document_count=Count("documents", distinct=True))
        .prefetch_related(Prefetch("agents", queryset=agents))
        .order_by("name", "id")
    )


def knowledge_base_get_for_actor(*, actor: Actor, knowledge_base_id: UUID | str) -> KnowledgeBase:
    try:
        return knowledge_base_list_for_actor(actor=actor).get(pk=_uuid_or_404(knowledge_base_id))
    except KnowledgeBase.DoesNotExist as error:
        raise Http404("knowledge base not found") from error


def document_list_for_knowledge_base(*, knowledge_base: KnowledgeBase) -> QuerySet[KnowledgeDocument]:
    return (
        KnowledgeDocument.objects.filter(tenant_id=knowledge_base.tenant_id, knowledge_base=knowledge_base)
        .select_related("file")
        .order_by("-created_at", "id")
    )


def document_get(*, knowledge_base: KnowledgeBase, document_id: UUID | str) -> KnowledgeDocument:
    try:
        return document_list_for_knowledge_base(knowledge_base=knowledge_base).get(
            pk=_uuid_or_404(document_id)
        )
    except KnowledgeDocument.DoesNotExist as error:
        raise Http404("document not found") from error


def with_searchable_files(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """Sessions annotated with what ``file_search`` could search, read in the same statement."""
    knowledge = KnowledgeBase.agents.through.objects.filter(agent_id=OuterRef("agent_id"))
    attachments = StoredFile.objects.filter(session_id=OuterRef("pk"), purpose=FilePurpose.ATTACHMENT)
    return sessions.annotate(agent_has_knowledge=Exists(knowledge), has_attachments=Exists(attachments))


def session_has_searchable_files(session: Session) -> bool:
    """Whether the session's agent has a knowledge base or the session has attachments.

    Free for a session read through ``with_searchable_files`` or for posting
    (``sessions.statements.post_reads.session_for_posting``); one query otherwise.
    """
    if hasattr(session, "agent_has_knowledge") and hasattr(session, "has_attachments"):
        return bool(session.agent_has_knowledge or session.has_attachments)
    return (
        with_searchable_files(Session.objects.filter(pk=session.pk))
        .filter(Q(agent_has_knowledge=True) | Q(has_attachments=True))
        .exists()
    )
