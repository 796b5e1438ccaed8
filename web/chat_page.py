"""The chat page: the conversation list (filtered by agent, searched), the agent a new chat
starts with, and the open conversation's transcript."""

from dataclasses import dataclass
from uuid import UUID

from agents.models import Agent
from agents.selectors import agent_list_for_actor
from sessions.models import Session
from sessions.selectors import (
    SESSION_QUERY_MAX_LENGTH,
    last_used_agent_id,
    session_get_for_actor,
    session_list_for_actor,
    sessions_matching,
)
from tenants.actors import Actor
from web.transcript import ChatTranscript, chat_transcript

SIDEBAR_SESSIONS = 50


@dataclass(frozen=True)
class ChatSidebar:
    sessions: list[Session]
    agents: list[Agent]
    agent_filter: Agent | None
    query: str = ""


@dataclass(frozen=True)
class ChatPage:
    sidebar: ChatSidebar
    session: Session | None = None
    transcript: ChatTranscript | None = None
    # The agent a new conversation starts with: the filtered one, else the last one used.
    chosen_agent_id: UUID | None = None


def chat_sidebar(*, actor: Actor, agent_id: str = "", query: str = "") -> ChatSidebar:
    """Recent sessions (of one agent when filtered, matching the search when searched) with their
    lane status, and the agents to chat with."""
    agents = list(agent_list_for_actor(actor=actor).order_by("name"))
    agent_filter = next((agent for agent in agents if str(agent.pk) == agent_id), None)
    query = query.strip()[:SESSION_QUERY_MAX_LENGTH]
    sessions = sessions_matching(session_list_for_actor(actor=actor), query=query)
    if agent_filter is not None:
        sessions = sessions.filter(agent=agent_filter)
    return ChatSidebar(
        sessions=list(sessions[:SIDEBAR_SESSIONS]), agents=agents, agent_filter=agent_filter, query=query
    )


def _chosen_agent_id(*, actor: Actor, sidebar: ChatSidebar) -> UUID | None:
    active = [agent.pk for agent in sidebar.agents if agent.is_active]
    if sidebar.agent_filter is not None and sidebar.agent_filter.pk in active:
        return sidebar.agent_filter.pk
    last_used = last_used_agent_id(actor=actor)
    if last_used in active:
        return last_used
    return active[0] if active else None


def chat_page_for_actor(
    *, actor: Actor, session_id: str | None, agent_id: str = "", query: str = ""
) -> ChatPage:
    sidebar = chat_sidebar(actor=actor, agent_id=agent_id, query=query)
    if session_id is None:
        return ChatPage(sidebar=sidebar, chosen_agent_id=_chosen_agent_id(actor=actor, sidebar=sidebar))
    session = session_get_for_actor(actor=actor, session_id=session_id)
    return ChatPage(
        sidebar=sidebar, session=session, transcript=chat_transcript(actor=actor, session=session)
    )
