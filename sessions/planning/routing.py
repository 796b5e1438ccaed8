"""Routing: is a user message a simple question, a job for the tool loop, or a complex request to plan?"""

import re
from typing import Literal

from agents.runtime.offline import asks_for_a_tool

Route = Literal["simple", "tool", "complex"]
ROUTES: tuple[Route, ...] = ("simple", "tool", "complex")

ROUTER_SYSTEM_PROMPT = (
    "You route a user's message. Answer with only a JSON object "
    '{"route": "simple" | "tool" | "complex", "reason": "<one sentence>"}. '
    "simple: a question you can answer directly without tools. "
    "tool: a task needing one or a few tool calls. "
    "complex: a multi-part request (several tasks, research across sources, a plan) that is best "
    "split into steps carried out separately and then combined."
)

LIST_ITEM = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s+\S", re.MULTILINE)
PLAN_WORDS = re.compile(r"\b(plan|research|investigate|compare)\b.*\band\b", re.IGNORECASE | re.DOTALL)
TOOL_WORDS = re.compile(r"\b(search|fetch|look up|find|calculate|compute|read|open)\b", re.IGNORECASE)


def offline_route(text: str) -> tuple[Route, str]:
    """The offline model's rules: several listed tasks or "plan/research … and …" are complex."""
    items = len(LIST_ITEM.findall(text))
    if items >= 2:
        return "complex", f"the message lists {items} tasks"
    if PLAN_WORDS.search(text):
        return "complex", "the message asks to plan or research several things"
    if TOOL_WORDS.search(text) or asks_for_a_tool(text):
        return "tool", "the message asks for something a tool does"
    return "simple", "a short question the model answers directly"


def list_items(text: str) -> list[str]:
    """The listed tasks of a message, for the offline planner (one step each)."""
    return [
        re.sub(r"^\s*(?:\d+[.)]|[-*•])\s+", "", line).strip()
        for line in text.splitlines()
        if LIST_ITEM.match(line)
    ]


def route_from_answer(answer: dict[str, object] | None) -> tuple[Route, str] | None:
    """The router model's structured answer, or None when it is not one."""
    if answer is None:
        return None
    route = answer.get("route")
    for known in ROUTES:
        if route == known:
            return known, str(answer.get("reason") or "")[:1000]
    return None
