"""``core.api.serializers.FieldsBuiltOnce``: a class's fields are built once, copied per instance."""

import uuid
from unittest import mock

from django.utils import timezone
from rest_framework import serializers

from sessions.models import Run
from sessions.serializers import RunSerializer, RunSummarySerializer


def _run() -> Run:
    return Run(
        id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        status="queued",
        created_at=timezone.now(),
        agent_config={},
    )


def test_fields_are_built_once_per_class_and_each_instance_gets_its_own_bound_copies() -> None:
    first_run, second_run = _run(), _run()
    with mock.patch.object(
        serializers.ModelSerializer,
        "get_fields",
        autospec=True,
        side_effect=serializers.ModelSerializer.get_fields,
    ) as build:
        if "_fields_built_once" in RunSummarySerializer.__dict__:  # built by an earlier test
            delattr(RunSummarySerializer, "_fields_built_once")
        first = RunSummarySerializer(first_run)
        second = RunSummarySerializer(second_run)
        first_data, second_data = first.data, second.data

    assert build.call_count == 1
    assert first.fields["status"] is not second.fields["status"]
    assert first.fields["status"].parent is first
    assert (first_data["id"], second_data["id"]) == (str(first_run.id), str(second_run.id))
    # A subclass with other fields builds its own.
    assert "steps" in RunSerializer(first_run).fields
    assert "steps" not in first.fields
