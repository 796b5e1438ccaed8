"""What a call to an MCP server answers, apart from the client that makes it.

Kept out of ``mcp_servers.client`` so that importing them does not load the MCP SDK: a
process that never talks to an MCP server (``manage.py`` commands, most requests) never pays
for its import.
"""

from dataclasses import dataclass
from typing import Any


class McpUnavailable(Exception):
    """The server could not be reached or did not speak MCP; ``message`` says why, without secrets."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class DiscoveredTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]

    @property
    def is_read_only(self) -> bool:
        return self.annotations.get("readOnlyHint") is True


@dataclass(frozen=True)
class ToolListing:
    tools: list[DiscoveredTool]
    # The tools/list round trip on an initialized session: how responsive the server is,
    # without the connection set-up (for stdio, the start of a process).
    latency_ms: int


@dataclass(frozen=True)
class ToolCallResult:
    text: str
    is_error: bool
