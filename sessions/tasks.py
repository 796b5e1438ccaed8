"""django-q2 tasks: thin interfaces that take ids and call the execution layer.

``run_dispatch_next`` lives here too: it and ``execute_run`` refer to each other.
"""

from functools import partial
from typing import Any
from uuid import UUID

from django.db import transaction

from core.tasks import enqueue_task
from sessions.execution import run_execute
from sessions.lane import runs_to_dispatch
from sessions.models import Run
from sessions.planning.delivery import parent_resume_when_children_done
from sessions.publisher import wait_until_published
from sessions.run_host import run_queue_broker


def execute_run(run_id: str, claim_hint: Any = None) -> None:
    """Run one agent run to its end. Idempotent: a run that is not queued is left alone.

    Run tasks travel on the run queue and run hosts execute them (``sessions.run_host``).

    ``claim_hint`` is accepted and ignored: tasks queued by the previous version carry one.
    """
    run = run_execute(run_id=UUID(run_id))
    if run is None:
        return
    wait_until_published()  # the run's last events go out before the lane's bookkeeping runs
    if run.parent_run_id is not None:
        parent_resume_when_children_done(parent_id=run.parent_run_id)
    run_dispatch_next(session_id=run.session_id)


def run_dispatch_next(*, session_id: UUID) -> UUID | None:
    """Enqueue the task for the session's next run, when its lane is free, and its queued executors."""
    children, run_id = runs_to_dispatch(session_id)
    for child_id in children:
        _enqueue_run(child_id)
    if run_id is not None:
        _enqueue_run(run_id)
    return run_id


def _enqueue_run(run_id: UUID) -> None:
    """The run's task, on the run queue that run hosts take from (sessions.run_host)."""
    enqueue_task(execute_run, str(run_id), task_name=f"run-{run_id}", broker=run_queue_broker())


def require_run_queue() -> None:
    """Raise the broker's own error (a 503 to the client) when the run queue cannot take a task.

    A run's task goes out once the transaction that stored the run commits: a worker claims a run
    by a conditional update of its row, which must be committed to be seen, so the task cannot go
    out inside the transaction. Writers call this first, so an unreachable broker refuses the
    request with nothing stored, instead of storing a run whose task is lost.
    """
    run_queue_broker().ping()


def enqueue_run_on_commit(*, run: Run) -> None:
    """The run's task, once the transaction that queued it commits (on an idle lane: no dispatch).

    ``robust``: past the commit the run is stored, so a broker that fails in the instant since
    ``require_run_queue`` is logged rather than raised; the sweeper dispatches queued runs that
    nobody picked up (``sessions.sweeper``).
    """
    transaction.on_commit(partial(_enqueue_run, run.pk), robust=True)


def dispatch_on_commit(*, session_id: UUID) -> None:
    transaction.on_commit(lambda: run_dispatch_next(session_id=session_id), robust=True)
