from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from agents.model_clients import provider_key_check
from core.api.viewsets import TenantScopedViewSet
from tenants.models import ProviderKey, Role
from tenants.provider_keys.selectors import provider_key_list_for_actor
from tenants.provider_keys.serializers import (
    ProviderKeyCheckSerializer,
    ProviderKeySerializer,
    ProviderKeyUpdateSerializer,
)
from tenants.provider_keys.services import provider_key_create, provider_key_delete, provider_key_update

TAGS = ["provider-keys"]


@extend_schema_view(
    list=extend_schema(summary="List the tenant's provider keys", tags=TAGS),
    retrieve=extend_schema(summary="Read a provider key (never the key itself)", tags=TAGS),
    create=extend_schema(summary="Add a provider key", tags=TAGS),
    partial_update=extend_schema(
        summary="Replace a provider key or its base URL",
        tags=TAGS,
        request=ProviderKeyUpdateSerializer,
        responses={200: ProviderKeySerializer},
    ),
    update=extend_schema(
        summary="Replace a provider key and its base URL",
        tags=TAGS,
        request=ProviderKeyUpdateSerializer,
        responses={200: ProviderKeySerializer},
    ),
    destroy=extend_schema(summary="Delete a provider key", tags=TAGS),
)
class ProviderKeyViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """The tenant's own Anthropic and OpenAI-compatible keys, used instead of the platform's.
    Owners and admins only, for reading too."""

    # Read by the schema generator only; get_queryset scopes requests.
    queryset = ProviderKey.objects.none()
    serializer_class = ProviderKeySerializer
    ordering_fields = ["provider", "created_at", "updated_at"]
    read_role = Role.ADMIN
    write_role = Role.ADMIN

    def get_queryset(self) -> QuerySet[ProviderKey]:
        return provider_key_list_for_actor(actor=self.actor)

    def get_serializer_class(self) -> type[BaseSerializer]:
        if self.action in ("update", "partial_update"):
            return ProviderKeyUpdateSerializer
        return ProviderKeySerializer

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        provider_key = provider_key_create(actor=self.actor, **serializer.validated_data)
        return Response(self.get_serializer(provider_key).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: str | None = None, partial: bool = False) -> Response:
        provider_key = self.get_object()
        serializer = self.get_serializer(provider_key, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        provider_key = provider_key_update(
            actor=self.actor, provider_key=provider_key, **serializer.validated_data
        )
        return Response(self.get_serializer(provider_key).data)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk=pk, partial=True)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        provider_key_delete(actor=self.actor, provider_key=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Test a provider key",
        description=(
            "Makes one cheap call to the provider with the key (lists its models) and says whether it "
            "worked. A failure is described in general terms; the provider's answer is not echoed."
        ),
        tags=TAGS,
        request=None,
        responses={200: ProviderKeyCheckSerializer},
    )
    @action(detail=True, methods=["post"])
    def test(self, request: Request, pk: str | None = None) -> Response:
        result = provider_key_check(provider_key=self.get_object())
        return Response(ProviderKeyCheckSerializer(result).data)
