"""What the task workers are doing: the django-q2 clusters, the broker's queue and the tenant's queued runs.

Clusters publish their status every few seconds through the broker: in Redis with the
Redis broker, in Django's cache with the ORM broker. A cluster whose status this process
cannot read (a cache not shared with it, or a cluster stopped for more than a few
seconds) is simply not listed.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, TextChoices
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.status import Stat

from sessions.models import Run, RunStatus
from tenants.actors import Actor


class ClusterState(TextChoices):
    STARTING = "starting"
    WORKING = "working"
    IDLE = "idle"
    STOPPING = "stopping"
    STOPPED = "stopped"
    UNKNOWN = "unknown"


# django-q2 reports a cluster's state as a translated label; the API names it in English.
CLUSTER_STATE_LABELS = (
    (Conf.STARTING, ClusterState.STARTING),
    (Conf.WORKING, ClusterState.WORKING),
    (Conf.IDLE, ClusterState.IDLE),
    (Conf.STOPPING, ClusterState.STOPPING),
    (Conf.STOPPED, ClusterState.STOPPED),
)


@dataclass(frozen=True)
class ClusterStatus:
    cluster_id: str
    host: str
    pid: int
    status: ClusterState
    worker_pids: list[int]
    task_queue_size: int
    uptime_seconds: float | None


@dataclass(frozen=True)
class WorkerStatus:
    """Clusters and ``queue_depth`` are platform-wide; the queued-run numbers are the tenant's."""

    clusters: list[ClusterStatus]
    queue_depth: int
    queued_runs: int
    oldest_queued_run_age_seconds: float | None


def worker_status_for_actor(*, actor: Actor) -> WorkerStatus:
    broker = get_broker()
    now = timezone.now()
    queued = Run.objects.filter(tenant=actor.tenant, status=RunStatus.QUEUED).aggregate(
        count=Count("pk"), oldest_created_at=Min("created_at")
    )
    clusters = sorted(
        (_cluster_status(stat, now) for stat in Stat.get_all(broker=broker)),
        key=lambda cluster: (cluster.host, cluster.cluster_id),
    )
    return WorkerStatus(
        clusters=clusters,
        queue_depth=int(broker.queue_size()),
        queued_runs=queued["count"],
        oldest_queued_run_age_seconds=_seconds_since(queued["oldest_created_at"], now),
    )


def _cluster_status(stat: Any, now: datetime) -> ClusterStatus:
    return ClusterStatus(
        cluster_id=str(stat.cluster_id),
        host=str(stat.host),
        pid=int(stat.pid),
        status=_cluster_state(stat.status),
        worker_pids=[int(pid) for pid in stat.workers],
        task_queue_size=int(stat.task_q_size),
        uptime_seconds=_seconds_since(stat.tob, now),
    )


def _cluster_state(label: object) -> ClusterState:
    for state_label, state in CLUSTER_STATE_LABELS:
        if str(label) == str(state_label):
            return state
    return ClusterState.UNKNOWN


def _seconds_since(moment: datetime | None, now: datetime) -> float | None:
    if moment is None:
        return None
    return round((now - moment).total_seconds(), 3)
