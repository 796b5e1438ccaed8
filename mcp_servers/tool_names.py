"""How an MCP server's tools are named for models: ``<server>__<tool>``, within tool-name rules."""

import hashlib
import re

SERVER_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,40}$")
TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SEPARATOR = "__"
_UNSAFE_CHARACTERS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_LENGTH = 64
_DIGEST_LENGTH = 6


def mcp_tool_public_name(*, server_name: str, tool_name: str) -> str:
    """The name models see. Unsafe characters become ``_``; a name that had to be changed
    or shortened ends with a short digest of the original, so two tools never collide."""
    cleaned = _UNSAFE_CHARACTERS.sub("_", tool_name)
    name = f"{server_name}{SEPARATOR}{cleaned}"
    if cleaned == tool_name and len(name) <= _MAX_LENGTH:
        return name
    digest = hashlib.sha256(tool_name.encode()).hexdigest()[:_DIGEST_LENGTH]
    return f"{name[: _MAX_LENGTH - _DIGEST_LENGTH - 1]}_{digest}"


def mcp_tool_group(*, server_name: str) -> str:
    return f"mcp:{server_name}"
