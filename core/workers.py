"""What serves the runs: the run hosts' heartbeats and the run queue, for admins.

Tenant admins see whether run hosts are alive and their capacity, and their own tenant's queued
and active runs: nothing that counts another tenant's work or names a machine. Superusers see the
whole platform: each host's name, process id and active runs, every tenant's runs, the tasks
waiting in the run queue broker, and the django-q2 clusters (schedules and short tasks).

Clusters publish their status through the broker: in Redis with the Redis broker, in Django's
cache with the ORM broker. A cluster whose status this process cannot read (a cache not shared
with it, or a cluster stopped for more than a few seconds) is simply not listed.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from django.db.models import Count, Min, QuerySet, TextChoices
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.status import Stat

from sessions.models import Run, RunHostHeartbeat, RunStatus
from sessions.run_host import LEASED_STATUSES, run_queue_broker
from sessions.run_host_heartbeats import run_host_is_alive
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
class RunHostStatus:
    id: str
    capacity: int
    is_alive: bool
    started_at: datetime
    last_heartbeat_at: datetime
    last_heartbeat_age_seconds: float
    # Superusers only.
    host: str
    pid: int
    active_runs: int


@dataclass(frozen=True)
class RunQueueStatus:
    """Queued and active runs: the tenant's for a tenant admin, every tenant's for a superuser."""

    queued_runs: int
    oldest_queued_run_age_seconds: float | None
    active_runs: int
    # Superusers only: run tasks in the broker that no run host has taken yet (every tenant's).
    run_queue_depth: int | None


@dataclass(frozen=True)
class PlatformStatus:
    """Superusers only: the django-q2 clusters and their task queue."""

    clusters: list[ClusterStatus]
    task_queue_depth: int


@dataclass(frozen=True)
class WorkerStatus:
    scope: Literal["tenant", "platform"]
    run_hosts: list[RunHostStatus]
    run_queue: RunQueueStatus
    platform: PlatformStatus | None

    @property
    def alive_run_hosts(self) -> int:
        return sum(1 for host in self.run_hosts if host.is_alive)

    @property
    def capacity(self) -> int:
        return sum(host.capacity for host in self.run_hosts if host.is_alive)


def worker_status_for_actor(*, actor: Actor) -> WorkerStatus:
    now = timezone.now()
    is_platform = bool(actor.user.is_superuser)
    runs = Run.objects.all() if is_platform else Run.objects.filter(tenant=actor.tenant)
    return WorkerStatus(
        scope="platform" if is_platform else "tenant",
        run_hosts=run_host_statuses(now=now),
        run_queue=_run_queue_status(runs, now, is_platform=is_platform),
        platform=_platform_status(now) if is_platform else None,
    )


def run_host_statuses(*, now: datetime) -> list[RunHostStatus]:
    """Every run host that beat in the last day, the most recently started first."""
    heartbeats = RunHostHeartbeat.objects.order_by("-started_at", "id")
    return [
        RunHostStatus(
            id=str(heartbeat.pk),
            capacity=heartbeat.capacity,
            is_alive=run_host_is_alive(heartbeat.last_heartbeat_at, now=now),
            started_at=heartbeat.started_at,
            last_heartbeat_at=heartbeat.last_heartbeat_at,
            last_heartbeat_age_seconds=_seconds_since(heartbeat.last_heartbeat_at, now) or 0.0,
            host=heartbeat.hostname,
            pid=heartbeat.pid,
            active_runs=heartbeat.active_runs,
        )
        for heartbeat in heartbeats
    ]


def _run_queue_status(runs: "QuerySet[Run]", now: datetime, *, is_platform: bool) -> RunQueueStatus:
    queued = runs.filter(status=RunStatus.QUEUED).aggregate(
        count=Count("pk"), oldest_created_at=Min("created_at")
    )
    return RunQueueStatus(
        queued_runs=queued["count"],
        oldest_queued_run_age_seconds=_seconds_since(queued["oldest_created_at"], now),
        active_runs=runs.filter(status__in=LEASED_STATUSES).count(),
        run_queue_depth=int(run_queue_broker().queue_size()) if is_platform else None,
    )


def _platform_status(now: datetime) -> PlatformStatus:
    broker = get_broker()
    clusters = sorted(
        (_cluster_status(stat, now) for stat in Stat.get_all(broker=broker)),
        key=lambda cluster: (cluster.host, cluster.cluster_id),
    )
    return PlatformStatus(
        clusters=clusters,
        task_queue_depth=int(broker.queue_size()),
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
