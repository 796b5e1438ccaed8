"""MCP tool results as the text a model reads: text blocks joined, other blocks summarized."""

import base64
import binascii
import json
from typing import Any

import mcp_types

MAX_RESULT_CHARS = 100_000


def content_as_text(result: mcp_types.CallToolResult) -> str:
    """Text blocks joined; images, audio and binary resources summarized; capped in size."""
    parts = [_block_as_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, sort_keys=True))
    text = "\n".join(parts)
    if len(text) > MAX_RESULT_CHARS:
        text = text[:MAX_RESULT_CHARS] + f"\n[truncated: {len(text) - MAX_RESULT_CHARS} more characters]"
    return text


def _block_as_text(block: Any) -> str:
    if isinstance(block, mcp_types.TextContent):
        return block.text
    if isinstance(block, mcp_types.ImageContent | mcp_types.AudioContent):
        return f"[{block.type}: {block.mime_type}, {_decoded_size(block.data)} bytes]"
    if isinstance(block, mcp_types.ResourceLink):
        return f"[resource link: {block.name} <{block.uri}>]"
    if isinstance(block, mcp_types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, mcp_types.TextResourceContents):
            return f"[resource {resource.uri}]\n{resource.text}"
        mime_type = resource.mime_type or "application/octet-stream"
        return f"[resource {resource.uri}: {mime_type}, {_decoded_size(resource.blob)} bytes]"
    return f"[{getattr(block, 'type', 'unknown')} content]"


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)
