"""GET /api/v1/workers/: the run hosts (their heartbeats) and the run queue.

Tenant admins see the hosts' capacity and liveness and their own tenant's runs; superusers see
host names, process ids, every tenant's runs, the run queue broker and the django-q2 clusters.
"""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.signing import SignedPackage
from django_q.status import Stat, Status
from rest_framework.test import APIClient

from sessions.models import Run, RunHostHeartbeat, RunStatus, Session
from tenants.models import Role, Tenant
from tests.conftest import Cast, api_client_for
from tests.factories import make_agent, make_user
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)
TENANT_HOST_FIELDS = {
    "id",
    "capacity",
    "is_alive",
    "started_at",
    "last_heartbeat_at",
    "last_heartbeat_age_seconds",
}


@pytest.fixture
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def brokers(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[ORM, ORM]]:
    """Real ORM brokers on queues of their own (the clusters' and the run queue), publishing
    cluster stats in a private cache: they start empty whichever broker the settings choose."""
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"workers-{uuid.uuid4().hex}",
        }
    }
    tasks = ORM(list_key=f"workers-test-{uuid.uuid4().hex}")
    runs = ORM(list_key=f"runs-test-{uuid.uuid4().hex}")
    monkeypatch.setattr("core.workers.get_broker", lambda: tasks)
    monkeypatch.setattr("core.workers.run_queue_broker", lambda: runs)
    yield tasks, runs
    tasks.purge_queue()
    runs.purge_queue()


def publish_cluster(
    broker: ORM, *, cluster_id: str, host: str, started_seconds_ago: float, status: Any = Conf.IDLE
) -> None:
    """What a running cluster's sentinel publishes every cycle (django_q.status.Stat.save)."""
    stat = Status(pid=4100, cluster_id=cluster_id)
    stat.host = host
    stat.status = status
    stat.workers = [4101, 4102]
    stat.task_q_size = 3
    stat.tob = NOW - timedelta(seconds=started_seconds_ago)
    broker.set_stat(Stat.get_key(cluster_id), SignedPackage.dumps(stat, True), 60)


def beat(*, hostname: str, capacity: int, active_runs: int, seconds_ago: float) -> RunHostHeartbeat:
    """A run host's heartbeat row, as ``sessions.run_host_heartbeats.run_host_beat`` writes it."""
    return RunHostHeartbeat.objects.create(
        hostname=hostname,
        pid=4242,
        capacity=capacity,
        active_runs=active_runs,
        started_at=NOW - timedelta(hours=1),
        last_heartbeat_at=NOW - timedelta(seconds=seconds_ago),
    )


def make_run(tenant: Tenant, user: Any, *, seconds_ago: float, status: str = RunStatus.QUEUED) -> Run:
    session = Session.objects.create(tenant=tenant, agent=make_agent(tenant=tenant), created_by=user)
    run = Run.objects.create(
        tenant=tenant, session=session, agent=session.agent, created_by=user, status=status
    )
    Run.objects.filter(pk=run.pk).update(created_at=NOW - timedelta(seconds=seconds_ago))
    return run


def superuser_api(cast: Cast) -> APIClient:
    root = make_user("root@a.test", tenant=cast.tenant_a, role=Role.ADMIN)
    root.is_superuser = True
    root.save(update_fields=["is_superuser"])
    return api_client_for(cast.tenant_a, root)


def workers(api: APIClient) -> dict[str, Any]:
    response = api.get("/api/v1/workers/")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def test_no_run_host_alive_is_reported_as_such(
    cast: Cast, alice_api: APIClient, brokers: tuple[ORM, ORM], frozen_now: None
) -> None:
    tasks, _runs = brokers
    publish_cluster(tasks, cluster_id="busy", host="worker-1", started_seconds_ago=60)  # not a run host
    crashed = beat(hostname="worker-1", capacity=32, active_runs=4, seconds_ago=16)
    make_run(cast.tenant_a, cast.bob, seconds_ago=42.5)

    body = workers(alice_api)

    assert body == {
        "scope": "tenant",
        "alive_run_hosts": 0,
        "capacity": 0,
        "run_hosts": [
            {
                "id": str(crashed.pk),
                "capacity": 32,
                "is_alive": False,
                "started_at": "2026-03-02T11:00:00Z",
                "last_heartbeat_at": "2026-03-02T11:59:44Z",
                "last_heartbeat_age_seconds": 16.0,
            }
        ],
        "run_queue": {"queued_runs": 1, "oldest_queued_run_age_seconds": 42.5, "active_runs": 0},
    }


def test_nothing_at_all(cast: Cast, alice_api: APIClient, brokers: tuple[ORM, ORM]) -> None:
    assert workers(alice_api) == {
        "scope": "tenant",
        "alive_run_hosts": 0,
        "capacity": 0,
        "run_hosts": [],
        "run_queue": {"queued_runs": 0, "oldest_queued_run_age_seconds": None, "active_runs": 0},
    }


def test_tenant_admins_see_capacity_and_liveness_but_no_host_names_pids_or_other_tenants_runs(
    cast: Cast, alice_api: APIClient, carol_api: APIClient, brokers: tuple[ORM, ORM], frozen_now: None
) -> None:
    tasks, runs = brokers
    publish_cluster(tasks, cluster_id="c1", host="secret-machine-2", started_seconds_ago=60)
    runs.enqueue("a run task")
    beat(hostname="secret-machine-1", capacity=32, active_runs=9, seconds_ago=1)
    make_run(cast.tenant_a, cast.bob, seconds_ago=10)
    make_run(cast.tenant_a, cast.bob, seconds_ago=5, status=RunStatus.EXECUTING)
    make_run(cast.tenant_b, cast.carol, seconds_ago=300)
    make_run(cast.tenant_b, cast.carol, seconds_ago=20)
    make_run(cast.tenant_b, cast.carol, seconds_ago=20, status=RunStatus.PLANNING)
    make_run(cast.tenant_b, cast.carol, seconds_ago=20, status=RunStatus.EXECUTING)

    tenant_a = alice_api.get("/api/v1/workers/")
    tenant_b = carol_api.get("/api/v1/workers/")

    for response in (tenant_a, tenant_b):
        assert b"secret-machine" not in response.content
        assert b"4242" not in response.content and b"4100" not in response.content
        body = response.json()
        assert set(body) == {"scope", "alive_run_hosts", "capacity", "run_hosts", "run_queue"}
        assert [set(host) for host in body["run_hosts"]] == [TENANT_HOST_FIELDS]
        assert (body["scope"], body["alive_run_hosts"], body["capacity"]) == ("tenant", 1, 32)
    assert tenant_a.json()["run_queue"] == {
        "queued_runs": 1,
        "oldest_queued_run_age_seconds": 10.0,
        "active_runs": 1,
    }
    assert tenant_b.json()["run_queue"] == {
        "queued_runs": 2,
        "oldest_queued_run_age_seconds": 300.0,
        "active_runs": 2,
    }


def test_superusers_see_every_tenants_runs_host_names_pids_the_run_queue_and_clusters(
    cast: Cast, brokers: tuple[ORM, ORM], frozen_now: None
) -> None:
    tasks, runs = brokers
    publish_cluster(tasks, cluster_id="c1", host="worker-2", started_seconds_ago=30.25)
    tasks.enqueue("a short task")
    runs.enqueue("run task one")
    runs.enqueue("run task two")
    host = beat(hostname="worker-1", capacity=32, active_runs=9, seconds_ago=2.5)
    make_run(cast.tenant_a, cast.bob, seconds_ago=10)
    make_run(cast.tenant_b, cast.carol, seconds_ago=300)
    make_run(cast.tenant_b, cast.carol, seconds_ago=20, status=RunStatus.EXECUTING)

    body = workers(superuser_api(cast))

    assert body == {
        "scope": "platform",
        "alive_run_hosts": 1,
        "capacity": 32,
        "run_hosts": [
            {
                "id": str(host.pk),
                "capacity": 32,
                "is_alive": True,
                "started_at": "2026-03-02T11:00:00Z",
                "last_heartbeat_at": "2026-03-02T11:59:57.500000Z",
                "last_heartbeat_age_seconds": 2.5,
                "host": "worker-1",
                "pid": 4242,
                "active_runs": 9,
            }
        ],
        "run_queue": {
            "queued_runs": 2,
            "oldest_queued_run_age_seconds": 300.0,
            "active_runs": 1,
            "run_queue_depth": 2,
        },
        "clusters": [
            {
                "cluster_id": "c1",
                "host": "worker-2",
                "pid": 4100,
                "status": "idle",
                "workers": [4101, 4102],
                "task_queue_size": 3,
                "uptime_seconds": 30.25,
            }
        ],
        "task_queue_depth": 1,
    }


@pytest.mark.django_db(transaction=True)
def test_a_serving_worker_is_reported_alive_with_its_capacity_until_it_stops(
    cast: Cast, tmp_path: Path
) -> None:
    """A real ``manage.py worker`` process announces itself; stopped, it leaves."""
    admin_api = api_client_for(cast.tenant_a, cast.alice)
    stack = LiveStack(tmp_path, RUN_CONCURRENCY="7", RUN_HOST_HEARTBEAT_SECONDS="0.2")
    worker = stack.start_worker(workers=1)
    try:
        serving = wait_until(
            lambda: (body := workers(admin_api))["alive_run_hosts"] == 1 and body,
            timeout=60,
            message="the worker's heartbeat",
        )
        worker.stop()
        stopped = workers(admin_api)
    finally:
        stack.stop()

    assert (serving["capacity"], [host["capacity"] for host in serving["run_hosts"]]) == (7, [7])
    assert [set(host) for host in serving["run_hosts"]] == [TENANT_HOST_FIELDS]
    assert serving["run_hosts"][0]["is_alive"] is True
    assert (stopped["alive_run_hosts"], stopped["capacity"], stopped["run_hosts"]) == (0, 0, [])


@pytest.mark.parametrize("client_fixture", ["bob_api", "victor_api"])
def test_members_and_viewers_are_refused(
    cast: Cast, brokers: tuple[ORM, ORM], request: pytest.FixtureRequest, client_fixture: str
) -> None:
    response = request.getfixturevalue(client_fixture).get("/api/v1/workers/")

    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "code": "permission_denied",
            "message": "Your role does not allow this action.",
            "fields": {},
        }
    }


def test_anonymous_requests_are_refused(cast: Cast, brokers: tuple[ORM, ORM]) -> None:
    response = APIClient().get("/api/v1/workers/")

    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "code": "not_authenticated",
            "message": "Authentication credentials were not provided.",
            "fields": {},
        }
    }


def test_a_cluster_state_django_q2_does_not_name_is_unknown(
    cast: Cast, brokers: tuple[ORM, ORM], frozen_now: None
) -> None:
    tasks, _runs = brokers
    publish_cluster(tasks, cluster_id="odd", host="worker-1", started_seconds_ago=1, status="Rebooting")

    clusters = workers(superuser_api(cast))["clusters"]

    assert [(cluster["cluster_id"], cluster["status"]) for cluster in clusters] == [("odd", "unknown")]
