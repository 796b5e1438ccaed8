"""Token counts of model requests and the context window of each model.

Providers with a counting endpoint (Anthropic) count exactly through ``TokenCounter``; the others,
and a counter that fails, get a deterministic estimate: about four characters per token of the
request serialized as JSON (system prompt, messages and tool definitions). An image counts a fixed
estimate from its dimensions (``estimate_image_tokens``), never its base64 data as text.
"""

from __future__ import annotations

import json
import logging
import math
from typing import Any

from agents.runtime.types import (
    ChatMessage,
    ContentBlock,
    ModelClient,
    ModelError,
    ModelRequest,
    TokenCounter,
    Usage,
)

logger = logging.getLogger(__name__)

CHARACTERS_PER_TOKEN = 4
# Most specific prefix first: the first match wins.
CONTEXT_WINDOWS: tuple[tuple[str, int], ...] = (
    ("claude-", 200_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-5", 400_000),
    ("gpt-4o", 128_000),
    ("gpt-", 128_000),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("offline-", 1_000_000),
)
DEFAULT_CONTEXT_WINDOW = 128_000
# Below this share of the budget the estimate decides alone: no counting request is sent.
PRECISE_COUNT_FROM_SHARE = 0.5
# Anthropic's rule for an image: width x height / 750 tokens; larger images are scaled down to
# about this many, which is also the estimate of an image whose dimensions are unknown.
PIXELS_PER_IMAGE_TOKEN = 750
MAX_IMAGE_TOKENS = 1600
# Bounds for credit holds (``request_tokens_bound``). Every provider's tokenizer maps at least one
# byte of text to a token, so a request's bytes bound its text's tokens. What the provider adds
# around them (role markers, its tool-use system prompt) is under FRAMING_TOKENS_BOUND; an image
# is billed by its pixels after the provider scales it down, under IMAGE_TOKENS_BOUND for
# Anthropic's models and OpenAI's patch-counted ones.
FRAMING_TOKENS_BOUND = 1_000
IMAGE_TOKENS_BOUND = 4_000


def context_window_for(model_name: str, *, override: int | None = None) -> int:
    """The model's context window in tokens; a positive ``override`` (agent config) wins."""
    if override is not None and override > 0:
        return override
    lowered = model_name.lower()
    for prefix, window in CONTEXT_WINDOWS:
        if lowered.startswith(prefix):
            return window
    return DEFAULT_CONTEXT_WINDOW


def estimate_text_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARACTERS_PER_TOKEN)


def _serialized(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def estimate_image_tokens(block: ContentBlock) -> int:
    """Anthropic's count for an image of known dimensions; the most an image costs when they are unknown."""
    width, height = block.get("width"), block.get("height")
    if not width or not height:
        return MAX_IMAGE_TOKENS
    return min(MAX_IMAGE_TOKENS, math.ceil(width * height / PIXELS_PER_IMAGE_TOKEN))


def _message_payload(message: ChatMessage) -> dict[str, Any]:
    """The message as counted as text: images are left out, they count by ``estimate_image_tokens``."""
    return {
        "role": message.role,
        "content": [block for block in message.content if block.get("type") != "image"],
    }


def estimate_all_image_tokens(messages: list[ChatMessage]) -> int:
    return sum(
        estimate_image_tokens(block)
        for message in messages
        for block in message.content
        if block.get("type") == "image"
    )


def estimate_message_tokens(message: ChatMessage) -> int:
    return estimate_text_tokens(_serialized(_message_payload(message))) + estimate_all_image_tokens([message])


def _request_text(request: ModelRequest) -> str:
    """The system prompt, messages (without images) and tool definitions, serialized as JSON."""
    payload = {
        "system": request.system,
        "messages": [_message_payload(message) for message in request.messages],
        "tools": [
            {"name": spec.name, "description": spec.description, "input_schema": spec.input_schema}
            for spec in request.tools
        ],
    }
    return _serialized(payload)


def estimate_request_tokens(request: ModelRequest) -> int:
    """The estimate: characters of the serialized system prompt, messages and tools, divided by four,
    plus each image's fixed estimate."""
    return estimate_text_tokens(_request_text(request)) + estimate_all_image_tokens(request.messages)


def request_tokens_bound(request: ModelRequest) -> int:
    """The most input tokens the request can be billed (what a credit hold takes): one token per
    byte of its serialized text, ``IMAGE_TOKENS_BOUND`` per image and ``FRAMING_TOKENS_BOUND``."""
    images = sum(
        1 for message in request.messages for block in message.content if block.get("type") == "image"
    )
    return len(_request_text(request).encode("utf-8")) + images * IMAGE_TOKENS_BOUND + FRAMING_TOKENS_BOUND


def count_request_tokens(
    model: ModelClient, request: ModelRequest, *, budget_tokens: int | None = None
) -> int:
    """The request's input tokens: the provider's count when it has one, else the estimate.

    With ``budget_tokens``, a request whose estimate is far below the budget is not sent to the
    provider's counter: only counts near the budget decide anything.
    """
    estimate = estimate_request_tokens(request)
    if not isinstance(model, TokenCounter):
        return estimate
    if budget_tokens is not None and estimate < budget_tokens * PRECISE_COUNT_FROM_SHARE:
        return estimate
    try:
        return model.count_tokens(request)
    except ModelError as error:
        logger.info("token counting failed (%s); using the estimate", error)
        return estimate


def usage_of_stopped_stream(reported: Usage, *, request: ModelRequest, streamed_text: str) -> Usage:
    """What a stream stopped early spent: the provider's counts, raised to the estimate where it
    reported less (its input count comes with the first event or only with the last, and its
    output count only at the end), so a stopped answer never counts fewer tokens than it showed."""
    return Usage(
        input_tokens=reported.input_tokens or estimate_request_tokens(request),
        output_tokens=max(reported.output_tokens, estimate_text_tokens(streamed_text)),
        cache_read_tokens=reported.cache_read_tokens,
        cache_write_tokens=reported.cache_write_tokens,
    )
