"""Pages of a session's or a run's stored events, after a sequence number."""

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from sessions.models import RunEvent
from sessions.serializers import RunEventSerializer

EVENT_PAGE_SIZE = 500
AFTER_PARAMETER = OpenApiParameter(
    "after", {"type": "integer", "minimum": 0}, description="Only events with a larger seq."
)
EventPage = inline_serializer(
    "RunEventPage",
    {"results": RunEventSerializer(many=True), "next": serializers.CharField(allow_null=True)},
)


def parse_after(request: Request) -> int:
    raw = request.query_params.get("after", "0")
    try:
        after = int(raw)
    except ValueError as error:
        raise ValidationError({"after": ["Must be an integer."]}) from error
    if after < 0:
        raise ValidationError({"after": ["Must be zero or more."]})
    return after


def event_page(request: Request, events: QuerySet[RunEvent]) -> Response:
    page = list(events[: EVENT_PAGE_SIZE + 1])
    has_more = len(page) > EVENT_PAGE_SIZE
    page = page[:EVENT_PAGE_SIZE]
    next_url = None
    if has_more:
        next_url = request.build_absolute_uri(f"{request.path}?after={page[-1].seq}")
    return Response({"results": RunEventSerializer(page, many=True).data, "next": next_url})
