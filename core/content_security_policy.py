"""A Content-Security-Policy on every HTML page: the browser itself refuses what a page should
never load or run (another site's image in an answer, an injected inline script), whatever a
template or a sanitizer lets through."""

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

HEADER = "Content-Security-Policy"


def policy_for(request: HttpRequest) -> str:
    """The configured directives, with this site's own websocket address in ``connect-src``.

    ``'self'`` covers ws: and wss: on the page's host only in browsers that follow CSP level 3, so
    the socket's address is named as well.
    """
    directives = {name: list(sources) for name, sources in settings.CONTENT_SECURITY_POLICY.items()}
    try:
        host = request.get_host()
    except DisallowedHost:
        host = ""
    if host:
        scheme = "wss" if request.is_secure() else "ws"
        directives.setdefault("connect-src", ["'self'"]).append(f"{scheme}://{host}")
    return "; ".join(" ".join([name, *sources]) for name, sources in directives.items())


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        is_html = response.get("Content-Type", "").startswith("text/html")
        if is_html and HEADER not in response:
            response[HEADER] = policy_for(request)
        return response
