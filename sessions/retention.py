"""Stored events of finished runs are kept for a while, then pruned; messages are kept.

``RUN_EVENT_RETENTION_DAYS`` (default 30) sets the window. A django-q2 schedule runs
``prune_run_events`` every hour, so each pass deletes about an hour's worth of runs.
"""

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule

from sessions.models import Run, RunEvent
from sessions.state import TERMINAL_RUN_STATUSES

RETENTION_SCHEDULE_NAME = "agentry.prune_run_events"
DEFAULT_RETENTION_DAYS = 30
# Short transactions: a run's events go in one statement, a batch of runs per commit.
RUNS_PER_BATCH = 200


def retention_days() -> int:
    return int(getattr(settings, "RUN_EVENT_RETENTION_DAYS", DEFAULT_RETENTION_DAYS))


def prune_run_events(older_than_days: int | None = None) -> int:
    """Delete the events of runs that finished more than the window ago; return how many."""
    days = retention_days() if older_than_days is None else older_than_days
    cutoff = timezone.now() - timedelta(days=days)
    expired_runs = Run.objects.filter(status__in=TERMINAL_RUN_STATUSES, finished_at__lt=cutoff)
    deleted_total = 0
    last_run_id = None
    while True:
        batch = expired_runs.order_by("pk")
        if last_run_id is not None:
            batch = batch.filter(pk__gt=last_run_id)
        run_ids = list(batch.values_list("pk", flat=True)[:RUNS_PER_BATCH])
        if not run_ids:
            return deleted_total
        with transaction.atomic():
            deleted, _ = RunEvent.objects.filter(run_id__in=run_ids).delete()
        deleted_total += deleted
        last_run_id = run_ids[-1]


def ensure_retention_schedule() -> Schedule:
    """Create the hourly pruning schedule, or bring an existing one up to date. Idempotent."""
    func = f"{prune_run_events.__module__}.{prune_run_events.__qualname__}"
    schedule = Schedule.objects.filter(name=RETENTION_SCHEDULE_NAME).order_by("pk").first()
    if schedule is None:
        return Schedule.objects.create(
            name=RETENTION_SCHEDULE_NAME,
            func=func,
            schedule_type=Schedule.HOURLY,
            repeats=-1,
            next_run=timezone.now() + timedelta(minutes=5),
        )
    if schedule.func != func or schedule.schedule_type != Schedule.HOURLY or schedule.repeats != -1:
        schedule.func, schedule.schedule_type, schedule.repeats = func, Schedule.HOURLY, -1
        schedule.save(update_fields=["func", "schedule_type", "repeats"])
    return schedule
