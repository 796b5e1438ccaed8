"""GET /api/v1/usage/: usage and cost per day, member, agent or model, as JSON or CSV."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from billing.usage import COLUMNS, GROUPINGS, MAX_REPORT_DAYS, usage_report_for_actor, usage_row_cells
from tenants.actors import actor_from_request

DEFAULT_REPORT_DAYS = 30
# A spreadsheet reads a cell starting with one of these as a formula (OWASP: CSV injection).
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_text(cell: Any) -> Any:
    """The cell as a spreadsheet shows it as text: a string that could start a formula gets a
    leading single quote; numbers and other strings are unchanged."""
    if isinstance(cell, str) and cell.startswith(FORMULA_PREFIXES):
        return f"'{cell}"
    return cell


class UsageCsvRenderer(BaseRenderer):
    """The report's rows as CSV with a header line (``?format=csv`` or ``Accept: text/csv``)."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\r\n")
        writer.writerow(COLUMNS)
        for row in data["results"]:
            writer.writerow(["" if row[name] is None else spreadsheet_text(row[name]) for name in COLUMNS])
        return buffer.getvalue().encode("utf-8")


class UsageQuerySerializer(serializers.Serializer):
    group_by = serializers.ChoiceField(choices=GROUPINGS, default="day")
    since = serializers.DateField(
        required=False, help_text="First day (UTC), included; default: 29 days before `until`."
    )
    until = serializers.DateField(required=False, help_text="Last day (UTC), included; default: today.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        until = attrs.get("until") or datetime.now(UTC).date()
        since = attrs.get("since") or _days_before(until, DEFAULT_REPORT_DAYS - 1)
        if until < since:
            raise serializers.ValidationError({"until": ["Must be on or after since."]})
        if (until - since).days + 1 > MAX_REPORT_DAYS:
            raise serializers.ValidationError(
                {"until": [f"The range may span at most {MAX_REPORT_DAYS} days."]}
            )
        return {**attrs, "since": since, "until": until}


def _days_before(day: date, days: int) -> date:
    try:
        return day - timedelta(days=days)
    except OverflowError:
        return date.min


class UsageRowSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The day (YYYY-MM-DD), member id, agent id or provider:model.")
    label = serializers.CharField()  # type: ignore[assignment]  # the row's field, not Serializer.label
    runs = serializers.IntegerField()
    model_calls = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    cost = serializers.CharField(
        allow_null=True,
        help_text="Credits of the priced model calls, six places; null when none had a known price.",
    )
    unpriced_model_calls = serializers.IntegerField()


class UsageReportSerializer(serializers.Serializer):
    group_by = serializers.ChoiceField(choices=GROUPINGS)
    since = serializers.DateField()
    until = serializers.DateField()
    results = UsageRowSerializer(many=True)


class UsageReportView(APIView):
    """Owners and admins see the whole workspace's usage; members and viewers their own runs'."""

    renderer_classes = [JSONRenderer, UsageCsvRenderer]

    @extend_schema(
        summary="Usage and cost per day, member, agent or model",
        tags=["usage"],
        parameters=[
            UsageQuerySerializer,
            OpenApiParameter(
                "format", str, enum=["json", "csv"], description="csv: the same rows as a CSV download."
            ),
        ],
        responses={
            (200, "application/json"): UsageReportSerializer,
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
    def get(self, request: Request) -> Response:
        actor = actor_from_request(request)
        if actor is None:  # the permission class already refused such requests
            raise exceptions.NotAuthenticated()
        given = {name: value for name, value in request.query_params.items() if value != ""}
        query = UsageQuerySerializer(data=given)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        rows = usage_report_for_actor(
            actor=actor, group_by=params["group_by"], since=params["since"], until=params["until"]
        )
        results = [dict(zip(COLUMNS, usage_row_cells(row), strict=True)) for row in rows]
        return Response(
            {
                "group_by": params["group_by"],
                "since": params["since"].isoformat(),
                "until": params["until"].isoformat(),
                "results": results,
            }
        )

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        renderer = getattr(request, "accepted_renderer", None)
        if isinstance(renderer, UsageCsvRenderer):
            if response.status_code >= 400:
                # Errors keep the API's JSON envelope, whatever format was asked for.
                request.accepted_renderer = JSONRenderer()
                request.accepted_media_type = JSONRenderer.media_type
            else:
                data = response.data
                name = f"usage-{data['group_by']}-{data['since']}-{data['until']}.csv"
                response["Content-Disposition"] = f'attachment; filename="{name}"'
        return super().finalize_response(request, response, *args, **kwargs)
