"""The base for tenant-owned API resources: scoping happens here and in the selectors."""

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, viewsets

from core.api.quota_errors import QuotaThrottled
from tenants.actors import Actor, actor_from_request
from tenants.quotas import QuotaExceeded


def as_api_validation_error(error: DjangoValidationError) -> exceptions.ValidationError:
    if hasattr(error, "error_dict"):
        return exceptions.ValidationError(
            {name: [m for e in errs for m in e.messages] for name, errs in error.error_dict.items()}
        )
    return exceptions.ValidationError({"non_field_errors": error.messages})


class TenantScopedViewSet(viewsets.GenericViewSet):
    """Subclasses define ``get_queryset`` by calling a selector with ``self.actor``."""

    @property
    def actor(self) -> Actor:
        actor = actor_from_request(self.request)
        if actor is None:  # the permission class already refused such requests
            raise exceptions.NotAuthenticated()
        return actor

    def handle_exception(self, exc: Exception) -> Any:
        if isinstance(exc, DjangoValidationError):
            exc = as_api_validation_error(exc)
        elif isinstance(exc, QuotaExceeded):
            exc = QuotaThrottled(exc)
        return super().handle_exception(exc)
