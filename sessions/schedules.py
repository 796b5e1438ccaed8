"""django-q2 schedules Agentry needs, created idempotently when a worker starts."""

from django_q.models import Schedule

from sessions.retention import ensure_retention_schedule
from sessions.sweeper import sweep_runs

SCHEDULES = [
    # (name, function path, minutes between runs)
    ("agentry.sweep_runs", "sessions.schedules.scheduled_sweep", 1),
    ("agentry.check_mcp_servers", "mcp_servers.health.check_enabled_servers", 5),
    ("agentry.extract_idle_memories", "memory.tasks.extract_idle_sessions", 5),
    ("agentry.prune_audit_entries", "audit.retention.prune_audit_entries", 60),
    ("agentry.requeue_stale_files", "files.tasks.requeue_stale_files", 5),
]


def scheduled_sweep() -> None:
    sweep_runs()


def ensure_schedules() -> None:
    ensure_retention_schedule()
    for name, func, minutes in SCHEDULES:
        Schedule.objects.update_or_create(
            name=name,
            defaults={"func": func, "schedule_type": Schedule.MINUTES, "minutes": minutes, "repeats": -1},
        )
