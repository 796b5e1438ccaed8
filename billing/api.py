"""Credits, the ledger and budgets over the API."""

from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.serializers import BaseSerializer

from billing.models import Budget, LedgerEntry
from billing.selectors import (
    budget_get_for_actor,
    budget_list_for_actor,
    budget_used_this_month,
    credit_summary_for_actor,
    ledger_list_for_actor,
)
from billing.serializers import (
    BudgetCreateSerializer,
    BudgetSerializer,
    BudgetUpdateSerializer,
    CreditGrantSerializer,
    CreditSettingSerializer,
    CreditSummarySerializer,
    LedgerEntrySerializer,
)
from billing.services import (
    budget_create,
    budget_delete,
    budget_update,
    credits_grant_by_actor,
    credits_set_enabled,
)
from core.api.viewsets import TenantScopedViewSet
from tenants.models import Role

TAGS = ["credits"]


class CreditViewSet(TenantScopedViewSet):
    """The workspace's credits: any member reads the balance; owners grant."""

    write_role = Role.OWNER
    serializer_class = CreditSummarySerializer

    @extend_schema(
        summary="The workspace's credit balance", tags=TAGS, responses={200: CreditSummarySerializer}
    )
    def summary(self, request: Request) -> Response:
        return Response(CreditSummarySerializer(credit_summary_for_actor(actor=self.actor)).data)

    @extend_schema(
        summary="Turn the workspace's credits off or on again (owners)",
        tags=TAGS,
        request=CreditSettingSerializer,
        responses={200: CreditSummarySerializer},
    )
    def set_enabled(self, request: Request) -> Response:
        serializer = CreditSettingSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        credits_set_enabled(actor=self.actor, is_enabled=serializer.validated_data["is_metered"])
        return Response(CreditSummarySerializer(credit_summary_for_actor(actor=self.actor)).data)

    @extend_schema(
        summary="Grant credits to the workspace (owners)",
        tags=TAGS,
        request=CreditGrantSerializer,
        responses={201: LedgerEntrySerializer},
    )
    def grant(self, request: Request) -> Response:
        serializer = CreditGrantSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        entry = credits_grant_by_actor(actor=self.actor, **serializer.validated_data)
        return Response(LedgerEntrySerializer(entry).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    list=extend_schema(summary="The credit ledger, newest first (owners and admins)", tags=TAGS),
    retrieve=extend_schema(summary="One ledger entry", tags=TAGS),
)
class LedgerEntryViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    """Every grant, hold, release, settlement and refund; append-only."""

    # Read by the schema generator only; get_queryset scopes requests.
    queryset = LedgerEntry.objects.none()
    serializer_class = LedgerEntrySerializer
    read_role = Role.ADMIN
    filterset_fields = ["kind", "run"]
    ordering_fields = ["id", "created_at"]

    def get_queryset(self) -> QuerySet[LedgerEntry]:
        return ledger_list_for_actor(actor=self.actor)


@extend_schema_view(
    list=extend_schema(summary="Monthly budgets of members and agents (owners and admins)", tags=TAGS),
    retrieve=extend_schema(summary="One budget", tags=TAGS),
    create=extend_schema(
        summary="Set a monthly budget for a member or an agent (owners)",
        tags=TAGS,
        request=BudgetCreateSerializer,
        responses={201: BudgetSerializer},
    ),
    partial_update=extend_schema(
        summary="Change a budget's monthly limit (owners)",
        tags=TAGS,
        request=BudgetUpdateSerializer,
        responses={200: BudgetSerializer},
    ),
    update=extend_schema(
        summary="Change a budget's monthly limit (owners)",
        tags=TAGS,
        request=BudgetUpdateSerializer,
        responses={200: BudgetSerializer},
    ),
    destroy=extend_schema(summary="Remove a budget (owners)", tags=TAGS),
)
class BudgetViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    # Read by the schema generator only; get_queryset scopes requests.
    queryset = Budget.objects.none()
    serializer_class = BudgetSerializer
    read_role = Role.ADMIN
    write_role = Role.OWNER
    ordering_fields = ["created_at"]

    def get_queryset(self) -> QuerySet[Budget]:
        return budget_list_for_actor(actor=self.actor)

    def get_object(self) -> Budget:
        return budget_get_for_actor(actor=self.actor, budget_id=self.kwargs["pk"])

    def get_serializer_class(self) -> type[BaseSerializer]:
        if self.action == "create":
            return BudgetCreateSerializer
        if self.action in ("update", "partial_update"):
            return BudgetUpdateSerializer
        return BudgetSerializer

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        if self.action in ("list", "retrieve"):
            context["used"] = budget_used_this_month(self.get_queryset())
        return context

    def create(self, request: Request) -> Response:
        serializer = BudgetCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        budget = budget_create(
            actor=self.actor,
            scope=data["scope"],
            monthly_limit=data["monthly_limit"],
            user_id=data.get("user"),
            agent_id=data.get("agent"),
        )
        return Response(self._output(budget), status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: str | None = None, partial: bool = False) -> Response:
        budget = self.get_object()
        serializer = BudgetUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        budget = budget_update(actor=self.actor, budget=budget, **serializer.validated_data)
        return Response(self._output(budget))

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk=pk, partial=True)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        budget_delete(actor=self.actor, budget=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _output(self, budget: Budget) -> dict[str, Any]:
        return BudgetSerializer(budget, context={"used": budget_used_this_month([budget])}).data
