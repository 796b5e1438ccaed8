from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from tenants.actors import actor_from_request
from tenants.models import Role

SAFE_METHODS = permissions.SAFE_METHODS


class IsTenantMember(permissions.BasePermission):
    """Any member of a tenant may read; writes need the view's ``write_role``.

    Views may set ``read_role`` and ``write_role`` (defaults: viewer and admin), or a
    ``required_roles`` dict per action name for finer rules.
    """

    message = "Your role does not allow this action."

    def has_permission(self, request: Request, view: Any) -> bool:
        actor = actor_from_request(request)
        if actor is None:
            return False
        action = getattr(view, "action", None)
        per_action = getattr(view, "required_roles", {})
        if action in per_action:
            return actor.can(per_action[action])
        if request.method in SAFE_METHODS:
            return actor.can(getattr(view, "read_role", Role.VIEWER))
        return actor.can(getattr(view, "write_role", Role.ADMIN))
