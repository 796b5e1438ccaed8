"""django-q2 tasks: thin interfaces that take ids and call the execution layer.

``run_dispatch_next`` lives here too: it and ``execute_run`` refer to each other.
"""

from functools import lru_cache
from uuid import UUID

from django.db import transaction
from django_q.brokers import Broker, get_broker
from django_q.tasks import async_task

from sessions.execution import run_execute
from sessions.lane import next_runnable_run_id, queued_child_run_ids
from sessions.models import Run
from sessions.planning.delivery import parent_resume_when_children_done


def execute_run(run_id: str) -> None:
    """Run one agent run to its end. Idempotent: a run that is not queued is left alone."""
    session_id = run_execute(run_id=UUID(run_id))
    if session_id is None:
        return
    parent_id = Run.objects.filter(pk=run_id).values_list("parent_run_id", flat=True).first()
    if parent_id is not None:
        parent_resume_when_children_done(parent_id=parent_id)
    run_dispatch_next(session_id=session_id)


def run_dispatch_next(*, session_id: UUID) -> UUID | None:
    """Enqueue the task for the session's next run, when its lane is free, and its queued executors."""
    for child_id in queued_child_run_ids(session_id):
        async_task(execute_run, str(child_id), task_name=f"run-{child_id}")
    run_id = next_runnable_run_id(session_id)
    if run_id is not None:
        async_task(execute_run, str(run_id), task_name=f"run-{run_id}", broker=_broker())
    return run_id


@lru_cache(maxsize=1)
def _broker() -> Broker:
    """One broker (and connection) per process instead of one per enqueued task."""
    return get_broker()


def enqueue_run_on_commit(*, run_id: UUID) -> None:
    transaction.on_commit(
        lambda: async_task(execute_run, str(run_id), task_name=f"run-{run_id}", broker=_broker())
    )


def dispatch_on_commit(*, session_id: UUID) -> None:
    transaction.on_commit(lambda: run_dispatch_next(session_id=session_id))
