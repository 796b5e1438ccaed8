from uuid import UUID

from django.db.models import QuerySet
from django.http import Http404

from agents.models import Agent
from tenants.actors import Actor


def agent_list_for_actor(*, actor: Actor) -> QuerySet[Agent]:
    return Agent.objects.filter(tenant=actor.tenant)


def agent_get_for_actor(*, actor: Actor, agent_id: UUID | str) -> Agent:
    """The actor's tenant's agent; a missing one and another tenant's one both raise 404."""
    try:
        return Agent.objects.get(tenant=actor.tenant, pk=UUID(str(agent_id)))
    except (Agent.DoesNotExist, ValueError) as error:
        raise Http404("agent not found") from error
