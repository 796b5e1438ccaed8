from uuid import UUID

from django.db.models import F, Prefetch, QuerySet
from django.http import Http404

from sessions.models import Message, Run, RunEvent, RunStatus, Session
from sessions.state import ACTIVE_RUN_STATUSES
from tenants.actors import Actor


def _uuid_or_404(value: UUID | str) -> UUID:
    try:
        return UUID(str(value))
    except ValueError as error:
        raise Http404("not found") from error


LANE_STATUSES = [RunStatus.QUEUED, *ACTIVE_RUN_STATUSES]


def session_list_for_actor(*, actor: Actor) -> QuerySet[Session]:
    lane_runs = (
        Run.objects.filter(status__in=LANE_STATUSES)
        .order_by("created_at", "id")
        .only("id", "session_id", "status", "created_at")
    )
    return (
        Session.objects.filter(tenant=actor.tenant)
        .select_related("agent", "created_by")
        .prefetch_related(Prefetch("runs", queryset=lane_runs, to_attr="lane_runs"))
        .order_by("-updated_at", "id")
    )


def session_get_for_actor(*, actor: Actor, session_id: UUID | str) -> Session:
    """The actor's tenant's session; a missing one and another tenant's both raise 404."""
    try:
        return session_list_for_actor(actor=actor).get(pk=_uuid_or_404(session_id))
    except Session.DoesNotExist as error:
        raise Http404("session not found") from error


def message_list_for_session(*, session: Session) -> QuerySet[Message]:
    # Queued messages have no position yet: they join the transcript when their run starts.
    # Executors' prompts and turns belong to their runs (see the run's events), not the conversation.
    return (
        Message.objects.filter(session=session)
        .exclude(run__parent_run__isnull=False)
        .order_by(F("position").asc(nulls_last=True), "created_at")
    )


def run_list_for_actor(*, actor: Actor) -> QuerySet[Run]:
    return Run.objects.filter(tenant=actor.tenant)


def run_get_for_actor(*, actor: Actor, run_id: UUID | str) -> Run:
    try:
        return run_list_for_actor(actor=actor).get(pk=_uuid_or_404(run_id))
    except Run.DoesNotExist as error:
        raise Http404("run not found") from error


def queued_runs_for_session(*, session: Session) -> QuerySet[Run]:
    return Run.objects.filter(session=session, status=RunStatus.QUEUED).order_by("created_at", "id")


def events_for_run(*, run: Run, after_seq: int = 0) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(run=run, seq__gt=after_seq).order_by("seq")


def events_for_session(*, session: Session, after_seq: int = 0) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(session=session, seq__gt=after_seq).order_by("seq")
