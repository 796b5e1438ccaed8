"""The memory tools, called directly with a ToolContext as the tool provider calls them."""

import json
import uuid
from typing import Any

import pytest

from agents.models import Agent
from memory.models import Memory, MemorySource, MemoryStatus
from tests.conftest import Cast
from tests.factories import make_agent
from tests.memory.factories import make_memory, make_session
from tools.builtins import load_builtin_tools
from tools.builtins.base import BUILTIN_REGISTRY, ToolContext, ToolError


def _context(cast: Cast, agent: Agent, user: Any) -> ToolContext:
    session = make_session(agent=agent, user=user)
    return ToolContext(
        tenant_id=agent.tenant_id,
        agent_id=agent.pk,
        session_id=session.pk,
        run_id=uuid.uuid4(),
        user_id=user.pk,
        user_role="member",
    )


def _call(name: str, arguments: dict[str, Any], context: ToolContext) -> Any:
    load_builtin_tools()
    return json.loads(BUILTIN_REGISTRY[name].run(arguments, context))


def test_the_memory_tools_are_registered_in_the_memory_group() -> None:
    load_builtin_tools()
    assert {
        name: (tool.group, tool.is_read_only)
        for name, tool in BUILTIN_REGISTRY.items()
        if tool.group == "memory"
    } == {
        "memory_search": ("memory", True),
        "memory_save": ("memory", False),
        "memory_forget": ("memory", False),
    }


def test_save_then_search_then_forget(cast: Cast, agent: Agent) -> None:
    context = _context(cast, agent, cast.bob)

    saved = _call(
        "memory_save",
        {"content": "The user prefers metric units.", "type": "preference", "importance": 0.8},
        context,
    )
    memory = Memory.objects.get(pk=saved["id"])
    assert saved == {"id": str(memory.pk), "saved": True}
    assert (memory.source, memory.status, memory.type, memory.importance) == (
        MemorySource.AGENT,
        MemoryStatus.ACTIVE,
        "preference",
        0.8,
    )
    assert (memory.subject_user_id, memory.created_by_id, memory.source_session_id) == (
        cast.bob.pk,
        cast.bob.pk,
        context.session_id,
    )

    found = _call("memory_search", {"query": "which units does the user like"}, context)
    assert [(item["id"], item["content"], item["about_user"]) for item in found] == [
        (str(memory.pk), "The user prefers metric units.", True)
    ]
    memory.refresh_from_db()
    assert memory.access_count == 1

    assert _call("memory_forget", {"memory_id": str(memory.pk)}, context) == {
        "id": str(memory.pk),
        "forgotten": True,
    }
    memory.refresh_from_db()
    assert memory.status == MemoryStatus.ARCHIVED
    assert _call("memory_search", {"query": "metric units"}, context) == []


def test_saving_what_is_already_remembered_keeps_one_memory(cast: Cast, agent: Agent) -> None:
    context = _context(cast, agent, cast.bob)
    first = _call("memory_save", {"content": "The user prefers metric units.", "importance": 0.4}, context)
    again = _call("memory_save", {"content": "The user prefers metric units!", "importance": 0.9}, context)
    assert again == {"id": first["id"], "saved": False, "reason": "already remembered"}
    assert list(Memory.objects.values_list("importance", flat=True)) == [0.9]


def test_general_memories_are_shared_and_user_memories_are_not(cast: Cast, agent: Agent) -> None:
    bob = _context(cast, agent, cast.bob)
    alice = _context(cast, agent, cast.alice)
    _call("memory_save", {"content": "Bob's cat is called Miso."}, bob)
    _call("memory_save", {"content": "The office cat is called Pixel.", "about": "general"}, bob)

    assert [item["content"] for item in _call("memory_search", {"query": "cat called"}, alice)] == [
        "The office cat is called Pixel."
    ]
    bobs = Memory.objects.get(content="Bob's cat is called Miso.")
    with pytest.raises(ToolError, match="not found"):
        _call("memory_forget", {"memory_id": str(bobs.pk)}, alice)
    assert Memory.objects.get(pk=bobs.pk).status == MemoryStatus.ACTIVE


def test_tools_never_reach_another_agent_or_tenant(cast: Cast, agent: Agent) -> None:
    other_agent = make_agent(tenant=cast.tenant_a, name="Other")
    foreign = make_agent(tenant=cast.tenant_b, name="Foreign")
    theirs = make_memory(agent=other_agent, content="Other agent: the vault code is 1234.")
    foreign_memory = make_memory(agent=foreign, content="Tenant B: the vault code is 9876.")
    context = _context(cast, agent, cast.bob)

    assert _call("memory_search", {"query": "vault code"}, context) == []
    for memory in (theirs, foreign_memory):
        with pytest.raises(ToolError, match="not found"):
            _call("memory_forget", {"memory_id": str(memory.pk)}, context)
        memory.refresh_from_db()
        assert memory.status == MemoryStatus.ACTIVE


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("memory_search", {"query": "  "}, "query must not be empty"),
        ("memory_save", {"content": " "}, "content: A memory cannot be empty."),
        (
            "memory_save",
            {"content": "x" * 4001},
            "content: Ensure this field has no more than 4000 characters.",
        ),
        (
            "memory_save",
            {"content": "ok", "type": "rumour"},
            "type: Choose one of fact, preference, context, episode.",
        ),
        ("memory_forget", {"memory_id": "nope"}, "memory_id must be a memory's id"),
    ],
)
def test_bad_arguments_are_tool_errors(
    cast: Cast, agent: Agent, name: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolError) as failed:
        _call(name, arguments, _context(cast, agent, cast.bob))
    assert str(failed.value).startswith(message)
    assert Memory.objects.count() == 0


def test_the_agent_memory_limit_is_enforced(cast: Cast, agent: Agent, settings: Any) -> None:
    settings.MEMORY_MAX_PER_AGENT = 1
    context = _context(cast, agent, cast.bob)
    _call("memory_save", {"content": "First thing."}, context)
    with pytest.raises(ToolError, match="already holds 1 memories"):
        _call("memory_save", {"content": "Second, unrelated thing."}, context)
