from uuid import UUID

from django.db.models import QuerySet
from django.http import Http404

from tenants.actors import Actor
from tenants.models import ProviderKey


def provider_key_list_for_actor(*, actor: Actor) -> QuerySet[ProviderKey]:
    return ProviderKey.objects.filter(tenant=actor.tenant).order_by("provider")


def provider_key_get_for_actor(*, actor: Actor, provider_key_id: UUID | str) -> ProviderKey:
    """The actor's tenant's key; a missing one and another tenant's one both raise 404."""
    try:
        return ProviderKey.objects.get(tenant=actor.tenant, pk=UUID(str(provider_key_id)))
    except (ProviderKey.DoesNotExist, ValueError) as error:
        raise Http404("Provider key not found") from error
