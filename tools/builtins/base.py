"""The contract of a built-in tool and the registry they join.

A built-in is plain data plus a function: name, group, description, JSON Schema, flags,
and ``run(arguments, context) -> str``. Tools that need configuration they lack report
``is_available() == False`` and are hidden, never faked.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from core.errors import ToolError

__all__ = ["BUILTIN_REGISTRY", "BuiltinTool", "ToolContext", "ToolError", "register"]


@dataclass(frozen=True)
class ToolContext:
    """Who is calling, for which run: tools scope everything they touch to this."""

    tenant_id: UUID
    agent_id: UUID | None
    session_id: UUID
    run_id: UUID
    user_id: int | None
    user_role: str
    # The model's id of the call being run (empty outside a run's loop).
    tool_call_id: str = ""
    # True once the run is cancelled or the call abandoned: long tools poll it to end early.
    should_stop: Callable[[], bool] = field(default=lambda: False, compare=False)


@dataclass(frozen=True)
class BuiltinTool:
    name: str
    group: str
    description: str
    input_schema: dict[str, Any]
    run: Callable[[dict[str, Any], ToolContext], str]
    is_read_only: bool = False
    timeout_seconds: float = 30.0
    is_available: Callable[[], bool] = field(default=lambda: True)
    # Why is_available() is False, for administrators ("" when available or not said).
    unavailable_reason: Callable[[], str] = field(default=lambda: "")
    # Starts other runs: hidden from child runs, so sub-agents cannot spawn (depth limit).
    starts_runs: bool = False
    # Waits for the user's answer: offered only to top-level runs (nobody watches a child's chat).
    asks_user: bool = False
    # Searches files: offered only to runs with a knowledge base or attachments to search.
    searches_files: bool = False


BUILTIN_REGISTRY: dict[str, BuiltinTool] = {}


def register(tool: BuiltinTool) -> BuiltinTool:
    if tool.name in BUILTIN_REGISTRY:
        raise ValueError(f"built-in tool {tool.name!r} registered twice")
    BUILTIN_REGISTRY[tool.name] = tool
    return tool
