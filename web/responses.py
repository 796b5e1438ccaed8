"""Answers shared by the page views: toasts for HTMX swaps, redirects with a message."""

import json

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme

TOAST_EVENT = "agentry:toast"


def with_toast(response: HttpResponse, message: str, *, level: str = "success") -> HttpResponse:
    """An HTMX response that shows a toast when it lands (``HX-Trigger``)."""
    response["HX-Trigger"] = json.dumps({TOAST_EVENT: {"message": message, "level": level}})
    return response


def redirect_back(
    request: HttpRequest, fallback: str, message: str = "", *, level: str = "success"
) -> HttpResponse:
    """Back to ``next`` (a local URL only) or ``fallback``, with a toast on the next page."""
    if message:
        messages.add_message(request, messages.ERROR if level == "error" else messages.SUCCESS, message)
    target = request.POST.get("next") or request.GET.get("next") or ""
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = fallback
    return HttpResponseRedirect(target or fallback)


def error_text(error: ValidationError) -> str:
    """A service's refusal as one sentence for a toast."""
    if hasattr(error, "error_dict"):
        return " ".join(message for messages_ in error.message_dict.values() for message in messages_)
    return " ".join(error.messages)
