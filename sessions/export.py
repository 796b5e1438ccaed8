"""A conversation as a file people keep: Markdown to read, JSON to process.

Both hold the conversation as the messages list has it (the branch shown, sessions.branches):
the people's messages with their attachments, and the agent's answers with the passages they
cite. Tool calls and results, and executors' own turns, stay out; queued messages (not answered
yet) too.
"""

import json
from typing import Any

from core.markdown import markdown_escape
from files.citations import citations_by_run, cited_in, citing_run_ids
from sessions.branches import messages_in_order, shown_path
from sessions.models import MessageRole, Session

SPOKEN_ROLES = (MessageRole.USER, MessageRole.ASSISTANT)
# Follows an answer its run stopped while it streamed (the text is what streamed until then).
STOPPED_NOTE = "*(stopped)*"


def exported_messages(session: Session) -> list[dict[str, Any]]:
    _tree, path = shown_path(session)
    messages = [
        message
        for message in messages_in_order(path)
        if message.role in SPOKEN_ROLES and message.position is not None
    ]
    citations = citations_by_run(citing_run_ids(messages))
    return [
        {
            "role": message.role,
            "text": message.text,
            "is_stopped": message.is_stopped,
            "attachments": [
                {key: block[key] for key in ("file_id", "name", "content_type", "size")}
                for block in message.content
                if block.get("type") == "attachment"
            ],
            "citations": cited_in(message.text, citations.get(message.run_id, []))
            if message.role == MessageRole.ASSISTANT and message.run_id
            else [],
            "created_at": message.created_at.isoformat(),
        }
        for message in messages
    ]


def session_as_json(session: Session) -> str:
    document = {
        "session": {
            "id": str(session.pk),
            "title": session.title,
            "agent": session.agent.name,
            "created_at": session.created_at.isoformat(),
        },
        "messages": exported_messages(session),
    }
    return json.dumps(document, ensure_ascii=False, indent=2)


def session_as_markdown(session: Session) -> str:
    """The answers are Markdown already; titles, names and what people typed are text, escaped."""
    agent_name = markdown_escape(session.agent.name)
    # A heading is one line: a title taken from a message of several lines is joined into one.
    title = " ".join((session.title or "Conversation").split())
    lines = [f"# {markdown_escape(title)}", "", f"With {agent_name}.", ""]
    for message in exported_messages(session):
        is_user = message["role"] == MessageRole.USER
        text = message["text"].strip()
        lines += [
            f"## {'You' if is_user else agent_name}",
            "",
            markdown_escape(text) if is_user else text,
            "",
        ]
        if message["is_stopped"]:
            lines += [STOPPED_NOTE, ""]
        lines += [
            f"- Attached: {markdown_escape(attachment['name'])}" for attachment in message["attachments"]
        ]
        lines += [_source_line(citation) for citation in message["citations"]]
        if message["attachments"] or message["citations"]:
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _source_line(citation: dict[str, Any]) -> str:
    where = f", page {citation['page']}" if citation["page"] is not None else ""
    return f"- [{citation['number']}] {markdown_escape(citation['document'])}{where}"


def export_file_name(session: Session, extension: str) -> str:
    return f"conversation-{session.pk}.{extension}"
