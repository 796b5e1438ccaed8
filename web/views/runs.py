import json
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_POST

from sessions.cancel import run_cancel
from sessions.decisions import run_answer, run_approve
from sessions.models import Run
from sessions.selectors import run_get_for_actor
from sessions.services import run_retry
from sessions.state import InvalidTransition, StaleTransition
from tenants.actors import Actor
from tenants.models import Role
from tenants.quotas import QuotaExceeded
from web.access import is_htmx, page, render_page, wants_json
from web.responses import error_text, redirect_back
from web.timeline import run_timeline


@page()
def run_detail(request: HttpRequest, actor: Actor, run_id: str) -> HttpResponse:
    timeline = run_timeline(actor=actor, run_id=run_id)
    template = "web/runs/_timeline.html" if is_htmx(request) else "web/runs/detail.html"
    return render_page(request, actor, template, {"timeline": timeline})


def _run_action(
    request: HttpRequest, actor: Actor, run_id: str, action: Callable[[Run], Run | object], done: str
) -> HttpResponse:
    """Do one action on a run; answer JSON to the chat's script, else go back to the chat."""
    run = run_get_for_actor(actor=actor, run_id=run_id)
    chat_url = reverse("web:chat-session", kwargs={"session_id": run.session_id})
    try:
        action(run)
    except ValidationError as error:
        return _refused(request, chat_url, error_text(error))
    except QuotaExceeded as exceeded:
        return _refused(
            request, chat_url, f"{exceeded.message} Try again in {exceeded.retry_after_seconds} s."
        )
    except (InvalidTransition, StaleTransition):
        return _refused(request, chat_url, "The run changed meanwhile; try again.", status=409)
    if wants_json(request):
        return JsonResponse({"ok": True, "message": done})
    return redirect_back(request, chat_url, done)


def _refused(request: HttpRequest, fallback: str, message: str, *, status: int = 400) -> HttpResponse:
    if wants_json(request):
        return JsonResponse({"ok": False, "message": message}, status=status)
    return redirect_back(request, fallback, message, level="error")


@require_POST
@page(role=Role.MEMBER)
def run_cancel_view(request: HttpRequest, actor: Actor, run_id: str) -> HttpResponse:
    return _run_action(
        request, actor, run_id, lambda run: run_cancel(actor=actor, run=run), "Cancelling the run."
    )


@require_POST
@page(role=Role.MEMBER)
def run_retry_view(request: HttpRequest, actor: Actor, run_id: str) -> HttpResponse:
    return _run_action(request, actor, run_id, lambda run: run_retry(actor=actor, run=run), "Retrying.")


@require_POST
@page(role=Role.MEMBER)
def run_approve_view(request: HttpRequest, actor: Actor, run_id: str) -> HttpResponse:
    decision = request.POST.get("decision", "")
    if decision not in ("approve", "deny"):
        run = run_get_for_actor(actor=actor, run_id=run_id)
        fallback = reverse("web:chat-session", kwargs={"session_id": run.session_id})
        return _refused(request, fallback, "Choose approve or deny.")
    done = "Tool call approved." if decision == "approve" else "Tool call denied."
    try:
        arguments = _edited_arguments(request)
    except (ValueError, RecursionError):
        run = run_get_for_actor(actor=actor, run_id=run_id)
        fallback = reverse("web:chat-session", kwargs={"session_id": run.session_id})
        return _refused(request, fallback, "The arguments are not valid JSON.")
    return _run_action(
        request,
        actor,
        run_id,
        lambda run: run_approve(
            actor=actor,
            run=run,
            tool_call_id=request.POST.get("tool_call_id", ""),
            decision=decision,
            reason=request.POST.get("reason", "")[:1000],
            arguments=arguments,
        ),
        done,
    )


def _edited_arguments(request: HttpRequest) -> Any:
    """The approver's edited arguments (JSON in the form), or None when they edited nothing."""
    text = request.POST.get("arguments")
    return None if text is None else json.loads(text)


@require_POST
@page(role=Role.MEMBER)
def run_answer_view(request: HttpRequest, actor: Actor, run_id: str) -> HttpResponse:
    """The chat's answer to an ask_user question when its socket is down."""
    return _run_action(
        request,
        actor,
        run_id,
        lambda run: run_answer(
            actor=actor,
            run=run,
            tool_call_id=request.POST.get("tool_call_id", ""),
            answer=request.POST.get("answer", "")[:10_000],
        ),
        "Answer sent.",
    )
