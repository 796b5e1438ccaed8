"""Extraction: the agent's model reads the new part of a conversation and proposes memories,
which are stored as suggestions for people to approve, edit or reject.

A session is mined once per message: ``ExtractionState`` remembers the last message
position read. A lease on that row keeps two tasks from mining the same session at once,
and a failure backs off before the schedule tries the session again.
"""

import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents.model_clients import ProviderNotConfigured, model_client_for
from agents.models import ModelProvider
from agents.runtime.types import ChatMessage, ModelError, ModelRequest, ModelResponseCompleted
from billing.meter import metered, payer_for_session
from memory.models import MAX_MEMORY_CHARACTERS, ExtractionState, Memory, MemoryType
from memory.services import MemoryLimitReached, memory_suggest
from sessions.models import Message, MessageRole, Session

logger = logging.getLogger(__name__)

MAX_TRANSCRIPT_CHARACTERS = 24_000
MAX_PROPOSALS = 20
EXTRACTION_MAX_OUTPUT_TOKENS = 2000
LEASE = timedelta(minutes=10)
MAX_BACKOFF = timedelta(hours=24)
EXTRACTION_SYSTEM_PROMPT = """You maintain the long-term memory of an AI agent.
Read the conversation below and propose what is worth remembering in later conversations:
stable facts about the user or their work, their preferences, ongoing context (projects,
deadlines, decisions), and notable episodes. Skip small talk, one-off requests, anything
already obvious, and secrets (passwords, keys, card numbers).

Answer with only a JSON array, no prose. Each item is an object:
  {"type": "fact" | "preference" | "context" | "episode",
   "content": "one self-contained sentence, in the third person ('The user prefers ...')",
   "importance": a number from 0 (trivia) to 1 (essential),
   "about": "user" (about the person in this conversation) or "general"}
Answer [] when nothing is worth remembering."""


class ExtractionFailed(Exception):
    def __init__(self, message: str, *, is_retryable: bool) -> None:
        super().__init__(message)
        self.is_retryable = is_retryable


@dataclass(frozen=True)
class Proposal:
    type: str
    content: str
    importance: float
    is_about_user: bool = True


# --- Parsing the model's answer -------------------------------------------------------------


def find_json_items(text: str) -> list[Any] | None:
    """The first JSON array in ``text`` (or the list under an object's "memories" key), if any.

    Models wrap JSON in prose or code fences; every ``[`` and ``{`` is tried as a start.
    """
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        if isinstance(value, list):
            return value
        if isinstance(value, dict) and isinstance(value.get("memories"), list):
            return list(value["memories"])
    return None


def _importance(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if not isinstance(value, int | float) or value != value:  # NaN
        return None
    return min(max(float(value), 0.0), 1.0)


def proposal_from_item(item: Any) -> Proposal | None:
    """A valid proposal from one JSON item, or None for anything malformed."""
    if not isinstance(item, dict):
        return None
    content = item.get("content")
    if not isinstance(content, str) or not content.strip() or len(content.strip()) > MAX_MEMORY_CHARACTERS:
        return None
    memory_type = str(item.get("type", MemoryType.FACT)).strip().lower()
    if memory_type not in MemoryType.values:
        return None
    importance = _importance(item.get("importance", 0.5))
    if importance is None:
        return None
    return Proposal(
        type=memory_type,
        content=" ".join(content.split()),
        importance=importance,
        is_about_user=str(item.get("about", "user")).strip().lower() != "general",
    )


def parse_proposals(text: str) -> list[Proposal]:
    items = find_json_items(text)
    if items is None:
        raise ExtractionFailed("the model's answer held no JSON array", is_retryable=True)
    proposals = [proposal for item in items if (proposal := proposal_from_item(item)) is not None]
    return proposals[:MAX_PROPOSALS]


# --- The offline model: rules instead of a model ------------------------------------------------

_RULES: list[tuple[re.Pattern[str], str, str, float]] = [
    (re.compile(r"\bmy name is ([\w' -]{1,60})", re.I), MemoryType.FACT, "The user's name is {0}.", 0.8),
    (
        re.compile(r"\bi(?: am|'m) allergic to (.{2,200})", re.I),
        MemoryType.FACT,
        "The user is allergic to {0}.",
        0.9,
    ),
    (
        re.compile(r"\bi (?:really )?prefer (.{2,300})", re.I),
        MemoryType.PREFERENCE,
        "The user prefers {0}.",
        0.6,
    ),
    (
        re.compile(r"\bi (?:really )?(?:like|love|enjoy) (.{2,300})", re.I),
        MemoryType.PREFERENCE,
        "The user likes {0}.",
        0.5,
    ),
    (
        re.compile(r"\bi (?:really )?(?:dislike|hate|don't like|do not like) (.{2,300})", re.I),
        MemoryType.PREFERENCE,
        "The user dislikes {0}.",
        0.5,
    ),
    (
        re.compile(r"\bi (?:work|am working) (at|for|as|on) (.{2,200})", re.I),
        MemoryType.FACT,
        "The user works {0} {1}.",
        0.6,
    ),
    (re.compile(r"\bi live in (.{2,200})", re.I), MemoryType.FACT, "The user lives in {0}.", 0.6),
    (re.compile(r"\b(?:please )?remember(?: that)? (.{2,500})", re.I), MemoryType.FACT, "{0}.", 0.7),
]
_SENTENCE = re.compile(r"[^.!?\n]+")
_PERSON = [
    (re.compile(r"\bmy\b", re.I), "the user's"),
    (re.compile(r"\bi am\b|\bi'm\b", re.I), "the user is"),
    (re.compile(r"\bI\b"), "the user"),
    (re.compile(r"\bme\b", re.I), "the user"),
]


def _third_person(text: str) -> str:
    for pattern, replacement in _PERSON:
        text = pattern.sub(replacement, text)
    return text.strip(" ,;:")


def rule_based_proposals(user_texts: list[str]) -> list[Proposal]:
    """Deterministic proposals for the offline model: "my name is", "I prefer", "remember that"…"""
    proposals: list[Proposal] = []
    for text in user_texts:
        for sentence in _SENTENCE.findall(text):
            for pattern, memory_type, template, importance in _RULES:
                match = pattern.search(sentence)
                if match is None:
                    continue
                parts = [_third_person(group) for group in match.groups()]
                content = template.format(*parts)
                proposals.append(
                    Proposal(
                        type=memory_type, content=content[0].upper() + content[1:], importance=importance
                    )
                )
                break
    return proposals[:MAX_PROPOSALS]


# --- Asking the model ---------------------------------------------------------------------------


def transcript_text(messages: list[Message]) -> str:
    speakers = {MessageRole.USER: "User", MessageRole.ASSISTANT: "Assistant"}
    return "\n\n".join(
        f"{speakers[MessageRole(message.role)]}: {message.text.strip()}" for message in messages
    )


def model_proposals(session: Session, messages: list[Message]) -> list[Proposal]:
    agent = session.agent
    try:
        client = model_client_for(
            tenant=session.tenant, agent_config={"model_provider": agent.model_provider}
        )
        client = metered(client, payer_for_session(session, user_id=session.created_by_id))
    except ProviderNotConfigured as error:
        raise ExtractionFailed(str(error), is_retryable=False) from error
    request = ModelRequest(
        model=agent.effective_model_name,
        system=EXTRACTION_SYSTEM_PROMPT,
        messages=[ChatMessage(role="user", content=[{"type": "text", "text": transcript_text(messages)}])],
        max_tokens=EXTRACTION_MAX_OUTPUT_TOKENS,
        timeout_seconds=settings.MODEL_TIMEOUT_SECONDS,
    )
    completed: ModelResponseCompleted | None = None
    try:
        for event in client.stream(request, should_stop=lambda: False):
            if isinstance(event, ModelResponseCompleted):
                completed = event
    except ModelError as error:
        raise ExtractionFailed(f"the model failed: {error}", is_retryable=error.is_retryable) from error
    if completed is None:
        raise ExtractionFailed("the model's stream ended without a response", is_retryable=True)
    text = "".join(block.get("text", "") for block in completed.content if block.get("type") == "text")
    return parse_proposals(text)


# --- One extraction -----------------------------------------------------------------------------


def _claim(session: Session, *, now: datetime) -> bool:
    try:
        with transaction.atomic():
            ExtractionState.objects.get_or_create(session=session)
    except IntegrityError:
        pass  # created by a concurrent task a moment ago
    claimable = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    return bool(
        ExtractionState.objects.filter(claimable, session=session).update(lease_expires_at=now + LEASE)
    )


def _new_messages(session: Session, *, after: int) -> list[Message]:
    """The next messages to read, oldest first, as many as fit in one request."""
    candidates = Message.objects.filter(
        session=session, position__gt=after, role__in=[MessageRole.USER, MessageRole.ASSISTANT]
    ).order_by("position")
    chosen: list[Message] = []
    budget = MAX_TRANSCRIPT_CHARACTERS
    for message in candidates.iterator(chunk_size=100):
        size = len(message.text)
        if chosen and size > budget:
            break
        chosen.append(message)
        budget -= size
    return chosen


def _store(session: Session, proposals: list[Proposal]) -> list[Memory]:
    created: list[Memory] = []
    for proposal in proposals:
        if proposal.is_about_user and session.created_by_id is None:
            continue  # about a user who is gone: stored as general, it would reach everyone
        try:
            memory = memory_suggest(
                tenant_id=session.tenant_id,
                agent_id=session.agent_id,
                content=proposal.content,
                type=proposal.type,
                importance=proposal.importance,
                subject_user_id=session.created_by_id if proposal.is_about_user else None,
                source_session_id=session.pk,
            )
        except MemoryLimitReached:
            logger.warning("agent %s is full; extraction of session %s stops", session.agent_id, session.pk)
            break
        if memory is not None:
            created.append(memory)
    return created


def _backoff(failed_attempts: int) -> timedelta:
    return min(timedelta(minutes=5) * (2 ** max(failed_attempts - 1, 0)), MAX_BACKOFF)


def extract_memories(session: Session, *, now: datetime | None = None) -> list[Memory]:
    """Propose memories from the session's messages not read yet; returns the new suggestions.

    Returns [] when nothing is new or another task is extracting this session. Raises
    ``ExtractionFailed`` (recorded, with a back-off) when the model could not answer usefully.
    """
    now = now or timezone.now()
    if not _claim(session, now=now):
        return []
    state = ExtractionState.objects.get(session=session)
    messages = _new_messages(session, after=state.last_message_position)
    try:
        proposals = _proposals_for(session, messages) if messages else []
    except ExtractionFailed as error:
        ExtractionState.objects.filter(session=session).update(
            lease_expires_at=None,
            failed_attempts=F("failed_attempts") + 1,
            next_attempt_at=timezone.now() + _backoff(state.failed_attempts + 1),
            last_error=str(error)[:2000],
        )
        raise
    with transaction.atomic():
        created = _store(session, proposals)
        ExtractionState.objects.filter(session=session).update(
            last_message_position=messages[-1].position if messages else state.last_message_position,
            lease_expires_at=None,
            failed_attempts=0,
            next_attempt_at=None,
            last_error="",
            extracted_at=timezone.now(),
        )
    return created


def _proposals_for(session: Session, messages: list[Message]) -> list[Proposal]:
    if session.agent.model_provider == ModelProvider.OFFLINE:
        return rule_based_proposals(
            [message.text for message in messages if message.role == MessageRole.USER]
        )
    return model_proposals(session, messages)
