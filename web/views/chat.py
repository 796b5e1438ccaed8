from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agents.selectors import agent_get_for_actor
from sessions.selectors import session_get_for_actor
from sessions.services import session_delete, session_post_message
from tenants.actors import Actor
from tenants.models import Role
from tenants.quotas import QuotaExceeded
from web.access import page, render_page
from web.chat_page import ChatPage, chat_page_for_actor, chat_sidebar
from web.responses import error_text
from web.services import session_start
from web.transcript import user_turn_for_actor

RUN_PLACEHOLDER = "RUN_ID"
MESSAGE_PLACEHOLDER = "MESSAGE_ID"


def chat_config(chat: ChatPage, actor: Actor) -> dict[str, Any] | None:
    """What the chat script needs: where the live replay starts and the URLs of its actions."""
    if chat.session is None or chat.transcript is None:
        return None
    session, transcript = chat.session, chat.transcript
    return {
        "sessionId": str(session.pk),
        "afterSeq": transcript.after_seq,
        "settledRunIds": transcript.settled_run_ids,
        "offBranchRunIds": transcript.off_branch_run_ids,
        "laneRuns": [
            {"id": str(run.pk), "status": run.status, "messageId": str(run.user_message_id or "")}
            for run in transcript.lane_runs
        ],
        "maxSteps": session.agent.max_steps,
        "canPost": transcript.can_post,
        "socketPath": f"/ws/sessions/{session.pk}/",
        "urls": {
            "cancel": reverse("web:run-cancel", kwargs={"run_id": RUN_PLACEHOLDER}),
            "retry": reverse("web:run-retry", kwargs={"run_id": RUN_PLACEHOLDER}),
            "approve": reverse("web:run-approve", kwargs={"run_id": RUN_PLACEHOLDER}),
            "answer": reverse("web:run-answer", kwargs={"run_id": RUN_PLACEHOLDER}),
            "timeline": reverse("web:run-detail", kwargs={"run_id": RUN_PLACEHOLDER}),
            "message": reverse(
                "web:chat-message", kwargs={"session_id": session.pk, "message_id": MESSAGE_PLACEHOLDER}
            ),
            "send": reverse("web:chat-send", kwargs={"session_id": session.pk}),
        },
        "placeholders": {"run": RUN_PLACEHOLDER, "message": MESSAGE_PLACEHOLDER},
    }


def _chat_page(request: HttpRequest, actor: Actor, session_id: str | None) -> HttpResponse:
    chat = chat_page_for_actor(
        actor=actor,
        session_id=session_id,
        agent_id=request.GET.get("agent", ""),
        query=request.GET.get("q", ""),
    )
    context = {"chat": chat, "chat_config": chat_config(chat, actor)}
    return render_page(request, actor, "web/chat/page.html", context)


@page()
def chat_home(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _chat_page(request, actor, None)


@page()
def chat_session(request: HttpRequest, actor: Actor, session_id: str) -> HttpResponse:
    return _chat_page(request, actor, session_id)


@page()
def chat_sessions_fragment(request: HttpRequest, actor: Actor) -> HttpResponse:
    """The sidebar's session list, refreshed by the page while it is open."""
    sidebar = chat_sidebar(actor=actor, agent_id=request.GET.get("agent", ""), query=request.GET.get("q", ""))
    context = {"sidebar": sidebar, "current_session_id": request.GET.get("current", "")}
    return render_page(request, actor, "web/chat/_session_items.html", context)


@page()
def chat_message_fragment(
    request: HttpRequest, actor: Actor, session_id: str, message_id: str
) -> HttpResponse:
    """A user message posted from elsewhere (another tab, the API), for the live page to insert."""
    turn = user_turn_for_actor(actor=actor, session_id=session_id, message_id=message_id)
    return render_page(request, actor, "web/chat/_user_turn.html", {"turn": turn})


@require_POST
@page(role=Role.MEMBER)
def chat_new(request: HttpRequest, actor: Actor) -> HttpResponse:
    agent = agent_get_for_actor(actor=actor, agent_id=request.POST.get("agent", ""))
    try:
        session = session_start(actor=actor, agent=agent, content=request.POST.get("content", ""))
    except ValidationError as error:
        messages.error(request, error_text(error))
        return redirect(f"{reverse('web:chat')}?agent={agent.pk}")
    except QuotaExceeded as exceeded:
        messages.error(request, f"{exceeded.message} Try again in {exceeded.retry_after_seconds} s.")
        return redirect(f"{reverse('web:chat')}?agent={agent.pk}")
    return redirect("web:chat-session", session_id=session.pk)


@require_POST
@page(role=Role.MEMBER)
def chat_send(request: HttpRequest, actor: Actor, session_id: str) -> HttpResponse:
    """Posting without the page's script: the message queues like any other."""
    session = session_get_for_actor(actor=actor, session_id=session_id)
    try:
        session_post_message(actor=actor, session=session, content=request.POST.get("content", ""))
    except ValidationError as error:
        messages.error(request, error_text(error))
    except QuotaExceeded as exceeded:
        messages.error(request, f"{exceeded.message} Try again in {exceeded.retry_after_seconds} s.")
    return redirect("web:chat-session", session_id=session.pk)


@require_POST
@page(role=Role.MEMBER)
def chat_session_delete(request: HttpRequest, actor: Actor, session_id: str) -> HttpResponse:
    session = session_get_for_actor(actor=actor, session_id=session_id)
    try:
        session_delete(actor=actor, session=session)
    except ValidationError as error:
        messages.error(request, error_text(error))
        return redirect("web:chat-session", session_id=session.pk)
    messages.success(request, "Conversation deleted.")
    return redirect("web:chat")
