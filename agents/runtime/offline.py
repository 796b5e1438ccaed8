"""``offline-demo``: a deterministic local model so Agentry can be tried with no API key.

It follows a few fixed rules instead of thinking: a request of several parts (two or more
listed tasks, or "plan/research … and …") goes to ``create_plan`` when it is offered,
arithmetic goes to the ``calculator`` tool, questions about the time go to ``current_time``,
"delegate: <task>" goes to ``spawn_subagent`` when the agent has it, tool results (and a
plan's step results) are turned into an answer, an image is described by what is known of it
without seeing it (name, type, dimensions, size), and anything else is echoed back with a hint
to configure a real provider.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agents.runtime.plan_tool import CREATE_PLAN
from agents.runtime.tokens import estimate_all_image_tokens
from agents.runtime.types import (
    ChatMessage,
    ContentBlock,
    ModelRequest,
    ModelResponseCompleted,
    ModelStreamEvent,
    StreamCancelled,
    TextDelta,
    ToolCallRequested,
    Usage,
)
from core.markdown import markdown_escape

OFFLINE_MODEL_NAME = "offline-demo"
PROVIDER_HINT = (
    "Configure a real model provider (Anthropic or an OpenAI-compatible endpoint) for real answers."
)
MAX_ECHO_CHARACTERS = 200

_FUNCTION_NAMES = "sqrt|abs|round|min|max|log10|log|exp|sin|cos|tan|floor|ceil"
_ARITHMETIC_RUN = re.compile(rf"(?:{_FUNCTION_NAMES}|pi|\d|[\s.,+\-*/%()])+")
_HAS_OPERATION = re.compile(rf"[\d)]\s*(?:\*\*|[+\-*/%])\s*[-+(\d]|(?:{_FUNCTION_NAMES})\s*\(")
_ASKS_TO_COMPUTE = re.compile(r"\b(?:what is|what's|whats|calculate|compute|evaluate|how much is|solve)\b")
_ASKS_FOR_TIME = re.compile(
    r"\b(?:what time|the time|current time|time is it|time now|today'?s date|the date|current date|"
    r"what date|what day|date today)\b"
)
_ASKS_IDENTITY = re.compile(r"\b(?:who are you|what are you|your name|which model|what model)\b")
# How sessions.planning hands a planner its steps' results for the final answer.
PLAN_RESULTS_MARKER = "Results of the plan's steps:"
_PLAN_STEP = re.compile(
    r"^## (?P<key>[\w-]+): (?P<title>[^\n]*)\n(?P<result>.*?)(?=^## |\Z|\n\nThe plan's steps are done)",
    re.MULTILINE | re.DOTALL,
)
_DELEGATES = re.compile(r"^\s*delegate\s*:\s*(?P<task>\S.*)", re.IGNORECASE | re.DOTALL)
_LIST_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+\S", re.MULTILINE)
_PLAN_WORDS = re.compile(r"\b(plan|research|investigate|compare)\b.*\band\b", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class OfflineReply:
    text: str
    tool_call: ToolCallRequested | None = None


class OfflineModelClient:
    """A ``ModelClient`` that answers by rules, streaming word by word.

    ``delay_seconds`` pauses before each delta, for demos that should look like typing.
    """

    model_name = OFFLINE_MODEL_NAME

    def __init__(self, *, delay_seconds: float = 0.0) -> None:
        self.delay_seconds = delay_seconds

    def stream(self, request: ModelRequest, *, should_stop: Callable[[], bool]) -> Iterator[ModelStreamEvent]:
        reply = plan_reply(request)
        input_tokens = estimate_tokens(_request_text(request)) + estimate_all_image_tokens(request.messages)
        streamed = ""
        for chunk in re.findall(r"\S+\s*|\s+", reply.text):
            if self.delay_seconds:
                time.sleep(self.delay_seconds)
            if should_stop():
                raise StreamCancelled(
                    Usage(input_tokens=input_tokens, output_tokens=estimate_tokens(streamed))
                )
            streamed += chunk
            yield TextDelta(text=chunk)
        content: list[ContentBlock] = [{"type": "text", "text": reply.text}]
        output_text = reply.text
        if reply.tool_call is not None:
            yield reply.tool_call
            content.append(_tool_call_block(reply.tool_call))
            output_text += json.dumps(content[-1], sort_keys=True)
        yield ModelResponseCompleted(
            content=content,
            stop_reason="end_turn" if reply.tool_call is None else "tool_use",
            usage=Usage(input_tokens=input_tokens, output_tokens=estimate_tokens(output_text)),
        )


def plan_reply(request: ModelRequest) -> OfflineReply:
    """What the offline model says to the conversation in ``request``."""
    last = request.messages[-1] if request.messages else ChatMessage(role="user", content=[])
    text = " ".join(block["text"] for block in last.content if block.get("type") == "text").strip()
    # A synthesis first: its step results join the turn that answered the create_plan call.
    if (synthesis := _plan_results(text)) is not None:
        return OfflineReply(text=synthesis)
    results = [block for block in last.content if block.get("type") == "tool_result"]
    if results:
        return OfflineReply(text=_answer_from_results(results, request.messages))
    images = [block for block in last.content if block.get("type") == "image"]
    if images:
        return OfflineReply(text=_describe_images(images))
    offered = {spec.name for spec in request.tools}
    if CREATE_PLAN in offered and (reason := reason_to_plan(text)) is not None:
        call = _tool_call(request, CREATE_PLAN, {"reason": reason})
        return OfflineReply(text="This request has several parts: I will have them planned.", tool_call=call)
    delegated = _DELEGATES.match(text)
    if delegated and "spawn_subagent" in offered:
        task = delegated.group("task").strip()
        call = _tool_call(request, "spawn_subagent", {"task": task})
        return OfflineReply(text="Let me hand this to a sub-agent.", tool_call=call)
    expression = find_arithmetic(text)
    if expression and "calculator" in offered:
        call = _tool_call(request, "calculator", {"expression": expression})
        return OfflineReply(
            text=f"Let me calculate {markdown_escape(expression)} with the calculator.", tool_call=call
        )
    if "current_time" in offered and _ASKS_FOR_TIME.search(text.lower()):
        return OfflineReply(
            text="Let me check the current time.", tool_call=_tool_call(request, "current_time", {})
        )
    if _ASKS_IDENTITY.search(text.lower()):
        return OfflineReply(text=_identity())
    return OfflineReply(text=_echo(text))


def reason_to_plan(text: str) -> str | None:
    """Why a request of several parts is planned (two or more listed tasks, or "plan/research …
    and …"); None for anything else."""
    items = len(_LIST_ITEM.findall(text))
    if items >= 2:
        return f"the message lists {items} tasks"
    if _PLAN_WORDS.search(text):
        return "the message asks to plan or research several things"
    return None


def list_items(text: str) -> list[str]:
    """The listed tasks of a message: the offline planner makes each one a step."""
    return [
        re.sub(r"^\s*(?:\d+[.)]|[-*•])\s+", "", line).strip()
        for line in text.splitlines()
        if _LIST_ITEM.match(line)
    ]


def _plan_results(text: str) -> str | None:
    """A planner's synthesis request (sessions.planning): list each step's result under its id."""
    _, marker, rest = text.partition(PLAN_RESULTS_MARKER)
    if not marker:
        return None
    steps = [
        (match.group("key"), match.group("title"), " ".join(match.group("result").split()))
        for match in _PLAN_STEP.finditer(rest)
    ]
    if not steps:
        return None
    # A step's title is the person's words; its result is its executor's answer, Markdown already.
    lines = ["Here is what the plan's steps found:"]
    lines += [f"- {markdown_escape(title)} [{key}]: {result}" for key, title, result in steps]
    return "\n".join(lines)


def find_arithmetic(text: str) -> str | None:
    """The arithmetic expression a message asks for ("what is 12*7", "2^10?"), if any."""
    normalized = text.lower().replace("\u00d7", "*").replace("\u00f7", "/").replace("^", "**")
    candidates = [_trim(match.group()) for match in _ARITHMETIC_RUN.finditer(normalized)]
    expressions = [candidate for candidate in candidates if _HAS_OPERATION.search(candidate)]
    if not expressions:
        return None
    expression = max(expressions, key=len)
    is_whole_message = expression == _trim(normalized.rstrip("?!.= "))
    return expression if is_whole_message or _ASKS_TO_COMPUTE.search(normalized) else None


def estimate_tokens(text: str) -> int:
    """A deterministic stand-in for a tokenizer: about four characters per token."""
    return math.ceil(len(text) / 4)


def _trim(candidate: str) -> str:
    trimmed = candidate.strip(" \t\n,.")
    while trimmed.endswith(")") and trimmed.count(")") > trimmed.count("("):
        trimmed = trimmed[:-1].rstrip()
    while trimmed.startswith("(") and trimmed.count("(") > trimmed.count(")"):
        trimmed = trimmed[1:].lstrip()
    return trimmed


def _tool_call(request: ModelRequest, name: str, arguments: dict[str, str]) -> ToolCallRequested:
    # Deterministic, and unique within a conversation because the message count grows.
    digest = hashlib.sha256(f"{name}{arguments}".encode()).hexdigest()[:8]
    return ToolCallRequested(id=f"offline_{len(request.messages)}_{digest}", name=name, arguments=arguments)


def _tool_call_block(call: ToolCallRequested) -> ContentBlock:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}


def _answer_from_results(results: list[ContentBlock], messages: list[ChatMessage]) -> str:
    calls = {
        block["id"]: block
        for message in messages
        if message.role == "assistant"
        for block in message.content
        if block.get("type") == "tool_call"
    }
    return " ".join(_describe_result(result, calls.get(result["tool_call_id"])) for result in results)


def _describe_result(result: ContentBlock, call: ContentBlock | None) -> str:
    """The answer's summary of a tool result: the tool's output is text, a sub-agent's answer Markdown."""
    is_error = result.get("is_error", False)
    name = call["name"] if call else "tool"
    if name == "spawn_subagent":
        content = result["content"]
        return (
            f"The sub-agent could not answer: {content}" if is_error else f"The sub-agent answered: {content}"
        )
    content = markdown_escape(str(result["content"]))
    if name == "calculator" and call:
        expression = markdown_escape(str(call["arguments"].get("expression", "")))
        return f"I could not calculate {expression}: {content}" if is_error else f"{expression} = {content}."
    if name == "current_time":
        return f"I could not read the clock: {content}" if is_error else f"The current time is {content}."
    name = markdown_escape(name)
    return f"The {name} tool failed: {content}" if is_error else f"The {name} tool returned: {content}"


def _identity() -> str:
    return (
        f"I am {OFFLINE_MODEL_NAME}, the offline demo model built into Agentry. I follow a few fixed "
        "rules instead of thinking: I do arithmetic with the calculator tool, tell the time with the "
        f"current_time tool, and repeat what you said. {PROVIDER_HINT}"
    )


def _describe_images(images: list[ContentBlock]) -> str:
    """What can be said of images without seeing them: the facts their blocks carry."""
    received = "an image" if len(images) == 1 else f"{len(images)} images"
    facts = "; ".join(_image_facts(image) for image in images)
    shows = "it shows" if len(images) == 1 else "they show"
    return (
        f"I received {received} ({facts}). I am the offline demo model and cannot see what {shows}. "
        f"{PROVIDER_HINT}"
    )


def _image_facts(image: ContentBlock) -> str:
    width, height = image.get("width"), image.get("height")
    dimensions = f"{width}\u00d7{height} pixels, " if width and height else ""
    facts = f"{image['name']}, {image['media_type']}, {dimensions}{image['size']:,} bytes"
    return markdown_escape(facts)


def _echo(text: str) -> str:
    said = " ".join(text.split())
    if len(said) > MAX_ECHO_CHARACTERS:
        said = said[:MAX_ECHO_CHARACTERS].rstrip() + "…"
    understood = f'You said: "{markdown_escape(said)}".' if said else "I received no text."
    return f"(offline demo model) {understood} {PROVIDER_HINT}"


def _request_text(request: ModelRequest) -> str:
    """The request as counted as text: images count by their fixed estimate, not their base64 data."""
    messages = [
        {
            "role": message.role,
            "content": [block for block in message.content if block.get("type") != "image"],
        }
        for message in request.messages
    ]
    return request.system + json.dumps(messages, sort_keys=True, ensure_ascii=False)
