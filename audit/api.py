from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins

from audit.models import AuditEntry
from audit.selectors import audit_entry_get_for_actor, audit_entry_list_for_actor
from audit.serializers import AuditEntrySerializer, AuditFilterSerializer
from core.api.viewsets import TenantScopedViewSet
from tenants.models import Role


@extend_schema_view(
    list=extend_schema(
        summary="List the tenant's audit entries, newest first (owners and admins)",
        tags=["audit"],
        parameters=[AuditFilterSerializer],
    ),
    retrieve=extend_schema(summary="Read an audit entry (owners and admins)", tags=["audit"]),
)
class AuditEntryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Read-only: entries are written by the services that change things, and removed by retention."""

    # Read by the schema generator only; get_queryset scopes requests.
    queryset = AuditEntry.objects.none()
    serializer_class = AuditEntrySerializer
    read_role = Role.ADMIN
    # The filters are the selector's, read by AuditFilterSerializer.
    filter_backends: list[type] = []

    def get_queryset(self) -> QuerySet[AuditEntry]:
        # Empty values mean "not given", as for every other list's filters.
        given = {name: value for name, value in self.request.query_params.items() if value != ""}
        filters = AuditFilterSerializer(data=given)
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        return audit_entry_list_for_actor(
            actor=self.actor,
            user=data.get("actor", ""),
            object_type=data.get("object_type", ""),
            since=data.get("since"),
            until=data.get("until"),
        )

    def get_object(self) -> AuditEntry:
        return audit_entry_get_for_actor(actor=self.actor, entry_id=self.kwargs["pk"])
