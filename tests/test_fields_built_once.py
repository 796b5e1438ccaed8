"""``core.api.serializers.FieldsBuiltOnce``: a class's fields are built once, copied per instance,
and objects are represented without a copy."""

import uuid
from typing import Any
from unittest import mock

from django.utils import timezone
from rest_framework import serializers

from sessions.branches import BranchInfo
from sessions.models import Message, Run, Step
from sessions.serializers import MessageSerializer, RunSerializer, RunSummarySerializer, StepSerializer


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
        first_fields, second_fields = first.fields, second.fields
    first_data, second_data = first.data, second.data

    assert build.call_count == 1
    assert first_fields["status"] is not second_fields["status"]
    assert first_fields["status"].parent is first
    assert (first_data["id"], second_data["id"]) == (str(first_run.id), str(second_run.id))
    # A subclass with other fields builds its own.
    assert "steps" in RunSerializer(first_run).fields
    assert "steps" not in first.fields


def _finished_run() -> Run:
    return Run(
        id=uuid.uuid4(),
        tenant_id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        user_message_id=uuid.uuid4(),
        parent_run_id=uuid.uuid4(),
        parent_tool_call_id="toolu_1",
        retry_of_id=None,
        title="Sums",
        status="failed",
        stop_reason="llm_error",
        error="overloaded",
        attempt=2,
        model_calls=3,
        input_tokens=120,
        output_tokens=45,
        cache_read_tokens=7,
        tree_usage={"input_tokens": 200},
        route="direct",
        created_at=timezone.now(),
        started_at=timezone.now(),
        finished_at=timezone.now(),
        agent_config={"model_name": "m"},
    )


def _message(position: int | None) -> Message:
    return Message(
        id=uuid.uuid4(),
        session_id=uuid.uuid4(),
        role="assistant",
        content=[
            {"type": "text", "text": "4"},
            {"type": "tool_call", "id": "t", "name": "x", "arguments": {}},
        ],
        position=position,
        run_id=uuid.uuid4(),
        input_tokens=3,
        output_tokens=1,
        created_at=timezone.now(),
    )


def _step() -> Step:
    return Step(
        id=uuid.uuid4(),
        run_id=uuid.uuid4(),
        index=1,
        kind="tool_call",
        status="completed",
        tool_call_id="toolu_1",
        input={"name": "calculator"},
        output={"content": "4"},
        started_at=timezone.now(),
        finished_at=timezone.now(),
    )


def listed_message_serializer(message: Message) -> MessageSerializer:
    """As the messages list serializes them: the page's citations, artifacts and branches read
    beforehand (here none, and a message alone on its branch)."""
    alone = BranchInfo(parent_id=None, branch_index=1, branch_count=1, sibling_ids=[message.pk])
    return MessageSerializer(
        message, context={"citations": {}, "artifacts": {}, "branches": {message.pk: alone}}
    )


def test_the_representation_is_drfs_own_without_copying_fields_per_instance() -> None:
    cases: list[tuple[Any, Any]] = [
        (RunSummarySerializer, _finished_run()),
        (RunSummarySerializer, _run()),
        (listed_message_serializer, _message(position=None)),
        (listed_message_serializer, _message(position=4)),
        (StepSerializer, _step()),
    ]
    for serializer_class, instance in cases:
        serializer = serializer_class(instance)

        data = serializer.data

        assert "fields" not in serializer.__dict__  # no bound copy was made for this instance
        own_fields = serializer_class(instance)
        expected = serializers.Serializer.to_representation(own_fields, instance)
        if isinstance(own_fields, MessageSerializer):
            # Added from the context, after the fields.
            expected.update(citations=[], artifacts=[], parent_id=None, branch_index=1, branch_count=1)
            expected["sibling_ids"] = [str(instance.pk)]
        assert data == expected
    assert listed_message_serializer(_message(position=None)).data["is_queued"] is True
    assert listed_message_serializer(_message(position=4)).data["is_queued"] is False
