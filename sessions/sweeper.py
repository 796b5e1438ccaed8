"""Recovery: runs whose worker died, approvals and questions nobody answered, queued runs nobody
picked up.

Called by every worker process every RUN_SWEEP_INTERVAL_SECONDS and by a django-q2
schedule; each step is a conditional update, so concurrent sweepers do no harm.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from sessions.approvals import approval_decide, run_is_waiting_only_on_resolved_requests
from sessions.models import (
    ApprovalStatus,
    QuestionStatus,
    Run,
    RunStatus,
    StopReason,
    ToolApproval,
    UserQuestion,
)
from sessions.planning.delivery import parent_resume_when_children_done, waiting_parent_ids
from sessions.questions import question_resolve
from sessions.run_end import run_finish
from sessions.state import (
    ACTIVE_RUN_STATUSES,
    WAITING_FOR_PEOPLE_STATUSES,
    StaleTransition,
    run_transition,
)
from sessions.tasks import run_dispatch_next

logger = logging.getLogger(__name__)

# A queued run this old with a free lane lost its nudge (e.g. a broker restart).
UNDISPATCHED_AFTER = timedelta(seconds=10)


@dataclass
class SweepReport:
    requeued: int = 0
    failed: int = 0
    approvals_expired: int = 0
    questions_expired: int = 0
    resumed: int = 0
    redispatched: int = 0
    parents_resumed: int = 0


def sweep_runs() -> SweepReport:
    report = SweepReport()
    _expire_approvals(report)
    _recover_expired_leases(report)
    _redispatch_forgotten_queues(report)
    _resume_forgotten_parents(report)
    return report


def _expire_approvals(report: SweepReport) -> None:
    overdue = ToolApproval.objects.filter(status=ApprovalStatus.PENDING, expires_at__lt=timezone.now())
    for approval in overdue.select_related("run"):
        if approval_decide(
            approval=approval,
            decision=settings.APPROVAL_DEFAULT_DECISION,
            is_expiry=True,
            reason="the approval request expired",
        ):
            report.approvals_expired += 1
    _expire_questions(report)
    waiting = Run.objects.filter(status__in=WAITING_FOR_PEOPLE_STATUSES)
    for run in waiting:
        if run_is_waiting_only_on_resolved_requests(run) and run_resume(run=run):
            report.resumed += 1


def _expire_questions(report: SweepReport) -> None:
    """An unanswered question resolves as expired: the model is told nobody answered."""
    overdue = UserQuestion.objects.filter(status=QuestionStatus.PENDING, expires_at__lt=timezone.now())
    for question in overdue.select_related("run"):
        if question_resolve(question=question, is_expiry=True):
            report.questions_expired += 1


def run_resume(*, run: Run) -> bool:
    """Queue a run that waited for approvals or answers again; the lane starts it before later messages."""
    try:
        run_transition(run, RunStatus.QUEUED)
    except StaleTransition:
        return False
    run_dispatch_next(session_id=run.session_id)
    return True


def _recover_expired_leases(report: SweepReport) -> None:
    # A cancelling run without a lease was stopped while no worker held it (by an earlier
    # version that left such runs waiting for a worker): nobody else will end it.
    expired = Run.objects.filter(
        Q(
            status__in=[RunStatus.PLANNING, RunStatus.EXECUTING, RunStatus.CANCELLING],
            lease_expires_at__lt=timezone.now(),
        )
        | Q(status=RunStatus.CANCELLING, lease_expires_at__isnull=True)
    )
    for run in expired:
        try:
            if run.status == RunStatus.CANCELLING:
                run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED)
            elif run.attempt >= settings.RUN_MAX_ATTEMPTS:
                run_finish(
                    run,
                    status=RunStatus.FAILED,
                    stop_reason=StopReason.ERROR,
                    error=f"the run's worker stopped {run.attempt} times; giving up",
                )
                report.failed += 1
            else:
                run_transition(
                    run,
                    RunStatus.QUEUED,
                    actor="sweeper",
                    lease_owner="",
                    lease_expires_at=None,
                    attempt=run.attempt + 1,
                )
                report.requeued += 1
            run_dispatch_next(session_id=run.session_id)
        except StaleTransition:
            continue  # its worker renewed the lease or finished meanwhile


def _redispatch_forgotten_queues(report: SweepReport) -> None:
    cutoff = timezone.now() - UNDISPATCHED_AFTER
    sessions = (
        Run.objects.filter(status=RunStatus.QUEUED, created_at__lt=cutoff)
        .values_list("session_id", flat=True)
        .distinct()
    )
    for session_id in sessions:
        if not Run.objects.filter(
            session_id=session_id, status__in=ACTIVE_RUN_STATUSES, parent_run__isnull=True
        ).exists():
            run_dispatch_next(session_id=session_id)
            report.redispatched += 1
        elif Run.objects.filter(
            session_id=session_id, status=RunStatus.QUEUED, parent_run__isnull=False
        ).exists():
            run_dispatch_next(session_id=session_id)  # executors start beside their waiting parent
            report.redispatched += 1


def _resume_forgotten_parents(report: SweepReport) -> None:
    """A planning run whose children all ended but whose resume was lost (the child's worker died)."""
    for parent_id in waiting_parent_ids():
        if parent_resume_when_children_done(parent_id=parent_id):
            session_id = Run.objects.filter(pk=parent_id).values_list("session_id", flat=True).get()
            run_dispatch_next(session_id=session_id)
            report.parents_resumed += 1
