"""Reads of memories for people: tenant-scoped, the same 404 for missing and another tenant's."""

from uuid import UUID

from django.db.models import QuerySet
from django.http import Http404

from agents.models import Agent
from memory.fulltext import MemoryScope
from memory.models import Memory, MemoryStatus
from memory.retrieval import ScoredMemory, rank_memories
from tenants.actors import Actor

RELATED = ("subject_user", "created_by", "reviewed_by")


def memory_list_for_actor(*, actor: Actor) -> QuerySet[Memory]:
    return Memory.objects.filter(tenant=actor.tenant).select_related(*RELATED).defer("embedding")


def memory_list_for_agent(*, actor: Actor, agent: Agent) -> QuerySet[Memory]:
    return memory_list_for_actor(actor=actor).filter(agent=agent)


def memory_get_for_actor(*, actor: Actor, memory_id: UUID | str) -> Memory:
    try:
        return memory_list_for_actor(actor=actor).get(pk=UUID(str(memory_id)))
    except (Memory.DoesNotExist, ValueError) as error:
        raise Http404("memory not found") from error


def memory_search_for_agent(
    *,
    actor: Actor,
    agent: Agent,
    query: str,
    limit: int,
    statuses: tuple[str, ...] = (),
    types: tuple[str, ...] = (),
    subject_user_id: int | None = None,
) -> list[ScoredMemory]:
    """The agent's memories ranked for ``query`` as retrieval would rank them, any status unless
    filtered, every subject's unless ``subject_user_id`` narrows it to one person's."""
    if agent.tenant_id != actor.tenant.pk:
        raise Http404("agent not found")
    scope = MemoryScope(
        tenant_id=actor.tenant.pk,
        agent_id=agent.pk,
        statuses=statuses or tuple(MemoryStatus.values),
        types=types,
        subject_user_id=subject_user_id,
        include_general=subject_user_id is None,
        all_subjects=subject_user_id is None,
    )
    return rank_memories(scope=scope, query=query, limit=limit, select_related=RELATED)
