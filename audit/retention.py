"""Audit entries are kept for ``AUDIT_RETENTION_DAYS`` (default 365; 0 keeps them forever).

A django-q2 schedule (``sessions.schedules``) runs ``prune_audit_entries`` every hour, so
each pass deletes about an hour's worth; this is the only code that deletes entries.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from audit.models import AuditEntry

DEFAULT_RETENTION_DAYS = 365
# Short transactions: a first pass over a long backlog does not hold one huge delete.
ENTRIES_PER_BATCH = 1000


def retention_days() -> int:
    return int(getattr(settings, "AUDIT_RETENTION_DAYS", DEFAULT_RETENTION_DAYS))


def prune_audit_entries(older_than_days: int | None = None) -> int:
    """Delete the entries older than the window; return how many."""
    days = retention_days() if older_than_days is None else older_than_days
    if days <= 0:
        return 0
    expired = AuditEntry.objects.filter(created_at__lt=timezone.now() - timedelta(days=days))
    deleted_total = 0
    while True:
        ids = list(expired.order_by("pk").values_list("pk", flat=True)[:ENTRIES_PER_BATCH])
        if not ids:
            return deleted_total
        with transaction.atomic():
            deleted, _ = AuditEntry.objects.filter(pk__in=ids).delete()
        deleted_total += deleted
