"""The Django-backed ``ToolProvider``: runs built-in, HTTP and MCP tools for one run.

Arguments are validated against the tool's JSON Schema (``core.json_schemas``) before any
tool code runs. Calls
run in the loop's worker threads, so each call closes the database connection its
thread opened.
"""

import threading
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.db import connection

from agents.runtime.types import ToolCallRequested, ToolOutcome, ToolSpec
from core.json_schemas import instance_errors
from sessions.models import Run
from tools.builtins.base import BUILTIN_REGISTRY, ToolContext, ToolError
from tools.http_tools import run_http_tool
from tools.models import Tool, ToolKind
from tools.registry import RunToolset


def tool_context_for(run: Run) -> ToolContext:
    return ToolContext(
        tenant_id=run.tenant_id,
        agent_id=run.agent_id,
        session_id=run.session_id,
        run_id=run.pk,
        user_id=run.created_by_id,
        user_role=str(run.agent_config.get("actor_role", "member")),
    )


def argument_errors(schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    return instance_errors(schema, arguments)


class DjangoToolProvider:
    def __init__(self, toolset: RunToolset, context: ToolContext) -> None:
        self.toolset = toolset
        self.context = context

    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=tool.name,
                description=tool.description,
                input_schema=tool.input_schema or {"type": "object"},
            )
            for tool in self.toolset.allowed()
        ]

    def timeout_for(self, name: str) -> float:
        tool = self.toolset.tools.get(name)
        return float(tool.timeout_seconds) if tool else 30.0

    def is_read_only(self, name: str) -> bool:
        tool = self.toolset.tools.get(name)
        return tool is not None and tool.is_read_only

    def execute(self, call: ToolCallRequested, *, should_stop: Callable[[], bool]) -> ToolOutcome:
        tool = self.toolset.tools.get(call.name)
        if tool is None or not self.toolset.decisions[call.name].is_allowed:
            return ToolOutcome(content=f"unknown or unavailable tool {call.name!r}", is_error=True)
        errors = argument_errors(tool.input_schema or {"type": "object"}, call.arguments)
        if errors:
            # The model can correct its call; the tool never sees invalid arguments.
            return ToolOutcome(content="invalid arguments: " + "; ".join(errors), is_error=True)
        try:
            return ToolOutcome(
                content=self._run(
                    tool, call.arguments, replace(self.context, tool_call_id=call.id, should_stop=should_stop)
                )
            )
        except ToolError as error:
            return ToolOutcome(content=str(error), is_error=True)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connection.close()

    def _run(self, tool: Tool, arguments: dict[str, Any], context: ToolContext) -> str:
        if tool.kind == ToolKind.BUILTIN:
            return BUILTIN_REGISTRY[tool.name].run(arguments, context)
        if tool.kind == ToolKind.HTTP:
            return run_http_tool(tool, arguments)
        assert tool.mcp_server is not None
        from mcp_servers.client import call_server_tool  # loads the MCP SDK on first use

        result = call_server_tool(tool.mcp_server, tool.mcp_tool_name, arguments)
        if result.is_error:
            raise ToolError(result.text)
        return str(result.text)
