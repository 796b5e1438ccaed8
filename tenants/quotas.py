"""Rate limits and quotas checked before a message is accepted (issue 4).

The limits are per-tenant settings (``tenants.limits.DEFAULT_LIMITS``, overridden by
``Tenant.settings``), each a positive integer:

- ``messages_per_minute_per_user`` (20): runs a user may create in a tenant in any 60 s.
- ``model_tokens_per_minute`` (30000): input + output tokens of the tenant's steps that
  finished in any 60 s.
- ``active_runs_per_user`` (3): the user's runs in ``ACTIVE_RUN_STATUSES`` at once; queued
  runs wait in their lane and do not count.

The checks read the database, so the limits hold across processes and hosts, and a rejected
request leaves nothing behind. A check is not a reservation: requests that race past the same
check together are all accepted.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.core.exceptions import ImproperlyConfigured
from django.db.models import F, Sum, Window
from django.utils import timezone

from sessions.models import Run, Step
from sessions.state import ACTIVE_RUN_STATUSES
from sessions.statements.post_reads import quota_counts
from tenants.actors import Actor
from tenants.limits import tenant_limit
from tenants.models import Tenant

RATE_WINDOW = timedelta(seconds=60)
# Active runs end at no predictable time: clients poll again after this many seconds.
ACTIVE_RUNS_RETRY_AFTER_SECONDS = 5


class QuotaExceeded(Exception):
    """A request would go over a tenant's limit; retry after ``retry_after_seconds`` (≥ 1)."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_seconds: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_seconds = max(1, retry_after_seconds)


def check_post_message_quotas(*, actor: Actor) -> None:
    """Raise QuotaExceeded when posting a message now would go over any of the actor's limits.

    One statement counts all three; only a limit reached reads more (when to retry).
    """
    counts = quota_counts(
        tenant_id=actor.tenant.pk,
        user_id=actor.user_id,
        since=timezone.now() - RATE_WINDOW,
        active_statuses=sorted(ACTIVE_RUN_STATUSES),
    )
    if counts.active_runs >= _positive_limit(actor.tenant, "active_runs_per_user"):
        check_active_runs(actor=actor)
    if counts.recent_runs >= _positive_limit(actor.tenant, "messages_per_minute_per_user"):
        check_message_rate(actor=actor)
    if counts.recent_tokens >= _positive_limit(actor.tenant, "model_tokens_per_minute"):
        check_model_token_rate(tenant=actor.tenant)


def check_message_rate(*, actor: Actor) -> None:
    limit = _positive_limit(actor.tenant, "messages_per_minute_per_user")
    now = timezone.now()
    recent_runs = Run.objects.filter(
        tenant=actor.tenant, created_by_id=actor.user_id, created_at__gt=now - RATE_WINDOW
    ).order_by("-created_at")
    # While the limit-th newest run is in the window the user is at the limit; once it
    # leaves, at most limit - 1 remain.
    blocking_created_at = next(
        iter(recent_runs.values_list("created_at", flat=True)[limit - 1 : limit]), None
    )
    if blocking_created_at is not None:
        raise QuotaExceeded(
            f"Message limit reached: {limit} per minute per user in this workspace.",
            retry_after_seconds=_seconds_until_out_of_window(blocking_created_at, now),
        )


def check_model_token_rate(*, tenant: Tenant) -> None:
    limit = _positive_limit(tenant, "model_tokens_per_minute")
    now = timezone.now()
    recent_steps = Step.objects.filter(tenant=tenant, finished_at__gt=now - RATE_WINDOW)
    tokens_in_window = recent_steps.aggregate(tokens=Sum(F("input_tokens") + F("output_tokens")))["tokens"]
    if (tokens_in_window or 0) < limit:
        return
    # For each step, the tokens of that step and of every step that finished with or after it.
    tokens_since = Window(Sum(F("input_tokens") + F("output_tokens")), order_by=F("finished_at").desc())
    # While the newest step whose running total reaches the limit is in the window, the
    # tenant is at the limit; once it leaves, fewer tokens than the limit remain.
    blocking_finished_at = (
        recent_steps.annotate(tokens_since=tokens_since)
        .filter(tokens_since__gte=limit)
        .order_by("-finished_at")
        .values_list("finished_at", flat=True)
        .first()
    )
    if blocking_finished_at is not None:
        raise QuotaExceeded(
            f"Model token limit reached: {limit} per minute in this workspace.",
            retry_after_seconds=_seconds_until_out_of_window(blocking_finished_at, now),
        )


def check_active_runs(*, actor: Actor) -> None:
    limit = _positive_limit(actor.tenant, "active_runs_per_user")
    active_runs = Run.objects.filter(
        tenant=actor.tenant, created_by_id=actor.user_id, status__in=ACTIVE_RUN_STATUSES
    ).count()
    if active_runs >= limit:
        raise QuotaExceeded(
            f"Active run limit reached: {limit} at once per user in this workspace.",
            retry_after_seconds=ACTIVE_RUNS_RETRY_AFTER_SECONDS,
        )


def _positive_limit(tenant: Tenant, name: str) -> int:
    value = tenant_limit(tenant, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ImproperlyConfigured(f"Tenant {tenant.slug}: {name} must be a positive integer, not {value!r}.")
    return value


def _seconds_until_out_of_window(moment: datetime, now: datetime) -> int:
    return math.ceil((moment + RATE_WINDOW - now).total_seconds())
