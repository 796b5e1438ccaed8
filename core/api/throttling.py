from typing import Any

from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle


class ActorRateThrottle(SimpleRateThrottle):
    """A general ceiling per API key, per signed-in user, or per address when anonymous."""

    scope = "actor"

    def get_cache_key(self, request: Request, view: Any) -> str:
        api_key = getattr(request, "auth", None)
        if api_key is not None and hasattr(api_key, "pk"):
            ident = f"key:{api_key.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user:{request.user.pk}"
        else:
            ident = f"ip:{self.get_ident(request)}"
        return self.cache_format % {"scope": self.scope, "ident": ident}
