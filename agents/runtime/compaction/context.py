"""The layout of a compacted context: where it may be cut, where the note goes, how old turns read."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import accumulate

from agents.runtime.types import ChatMessage, ContentBlock, image_label

SUMMARY_HEADER = "[Summary of the earlier conversation]"
DROPPED_NOTE = (
    "[Earlier messages of this conversation were dropped to fit the model's context window; "
    "no summary of them could be written.]"
)
# How much of each rendered tool call or result the summarizer sees.
RENDERED_BLOCK_CHARACTERS = 4_000


def cut_points(messages: list[ChatMessage]) -> list[int]:
    """Indexes where the kept messages may start: no tool call before them waits for a result.

    A message carrying tool results never starts the kept part, so a tool call and its result
    are never separated. Index 0 is excluded: something must be left to summarize.
    """
    points: list[int] = []
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        results = {block["tool_call_id"] for block in message.content if block.get("type") == "tool_result"}
        if index > 0 and not open_calls and not results:
            points.append(index)
        open_calls -= results
        open_calls |= {block["id"] for block in message.content if block.get("type") == "tool_call"}
    return points


def choose_cut(
    messages: list[ChatMessage], *, message_tokens: list[int], keep_messages: int, recent_budget: float
) -> int | None:
    """Where the kept messages start, or None when no cut is possible.

    The latest cut point that keeps at least ``keep_messages`` messages; later ones while the kept
    messages exceed ``recent_budget`` tokens.
    """
    points = cut_points(messages)
    if not points:
        return None
    tail_tokens = list(accumulate(reversed(message_tokens)))[::-1]
    keeping_enough = [point for point in points if point <= len(messages) - keep_messages]
    cut = keeping_enough[-1] if keeping_enough else points[0]
    for later in (point for point in points if point > cut):
        if tail_tokens[cut] <= recent_budget:
            break
        cut = later
    return cut


def compaction_note(summary: str) -> str:
    """The text placed first in the compacted context: the summary, or the notice of dropped turns."""
    return f"{SUMMARY_HEADER}\n{summary}" if summary else DROPPED_NOTE


def with_note(note: str, tail: list[ChatMessage]) -> list[ChatMessage]:
    """The note as the first, user-role message, keeping roles valid for every provider.

    Anthropic wants a user message first and no two user messages in a row, so a tail that starts
    with a user message gets the note as its first block (after any tool results, which must lead).
    """
    block: ContentBlock = {"type": "text", "text": note}
    if not tail or tail[0].role != "user":
        return [ChatMessage(role="user", content=[block]), *tail]
    first = tail[0].content
    results = [b for b in first if b.get("type") == "tool_result"]
    others = [b for b in first if b.get("type") != "tool_result"]
    return [ChatMessage(role="user", content=[*results, block, *others]), *tail[1:]]


def is_note_only(messages: list[ChatMessage]) -> bool:
    """True when ``messages`` is just an earlier compaction's note: summarizing it again gains nothing."""
    if len(messages) != 1 or len(messages[0].content) != 1:
        return False
    text = str(messages[0].content[0].get("text", ""))
    return text.startswith(SUMMARY_HEADER) or text == DROPPED_NOTE


def render_transcript(messages: list[ChatMessage], *, max_characters: int) -> str:
    """The messages as plain text for the summarizer; long tool payloads and the middle are elided,
    images appear as their label (``image_label``)."""
    calls = {
        block["id"]: block["name"]
        for message in messages
        for block in message.content
        if block.get("type") == "tool_call"
    }
    lines = [line for message in messages for line in _rendered_lines(message, calls)]
    return _elided("\n\n".join(lines), max_characters)


def _rendered_lines(message: ChatMessage, calls: dict[str, str]) -> Iterable[str]:
    speaker = "User" if message.role == "user" else "Assistant"
    for block in message.content:
        block_type = block.get("type")
        if block_type == "text" and block["text"]:
            text = block["text"]
            is_note = text.startswith(SUMMARY_HEADER) or text == DROPPED_NOTE
            yield text if is_note else f"{speaker}: {text}"
        elif block_type == "tool_call":
            arguments = _elided(str(block.get("arguments", {})), RENDERED_BLOCK_CHARACTERS)
            yield f"Assistant called the tool {block['name']} with {arguments}"
        elif block_type == "tool_result":
            name = calls.get(block["tool_call_id"], "a tool")
            outcome = "failed" if block.get("is_error") else "returned"
            yield f"The tool {name} {outcome}: {_elided(str(block['content']), RENDERED_BLOCK_CHARACTERS)}"
        elif block_type == "image":
            # The summarizer reads text: an image's data would only spend its budget.
            yield f"{speaker}: {image_label(block)}"


def _elided(text: str, max_characters: int) -> str:
    if len(text) <= max_characters:
        return text
    half = max_characters // 2
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters omitted …]\n{text[-half:]}"
