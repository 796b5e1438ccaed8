"""Which tools a run may use. The built-in `time` and `math` tools for now; the tool
registry, policies and MCP tools arrive with their issue behind the same function."""

from agents.runtime.builtin_tools import BUILTIN_TOOLS, StaticToolProvider
from agents.runtime.types import ToolProvider
from sessions.models import Run


def tool_provider_for_run(run: Run) -> ToolProvider:
    return StaticToolProvider(BUILTIN_TOOLS)
