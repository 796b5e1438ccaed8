"""GET /api/v1/workers/: django-q2 clusters and queues for admins; queued-run numbers per tenant."""

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.signing import SignedPackage
from django_q.status import Stat, Status
from rest_framework.test import APIClient

from sessions.models import Run, RunStatus, Session
from tenants.models import Role, Tenant
from tests.conftest import Cast, api_client_for
from tests.factories import make_agent, make_user

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(timezone, "now", lambda: NOW)


@pytest.fixture
def broker(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[ORM]:
    """A real ORM broker on a queue of its own, publishing cluster stats in a private cache.

    With REDIS_URL set the project's broker is Redis, shared with other test runs; this
    one starts empty whichever broker the settings choose.
    """
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": f"workers-{uuid.uuid4().hex}",
        }
    }
    isolated = ORM(list_key=f"workers-test-{uuid.uuid4().hex}")
    monkeypatch.setattr("core.workers.get_broker", lambda: isolated)
    yield isolated
    isolated.purge_queue()


def publish_cluster(
    broker: ORM, *, cluster_id: str, host: str, status: Any, started_seconds_ago: float
) -> None:
    """What a running cluster's sentinel publishes every cycle (django_q.status.Stat.save)."""
    stat = Status(pid=4100, cluster_id=cluster_id)
    stat.host = host
    stat.status = status
    stat.workers = [4101, 4102]
    stat.task_q_size = 3
    stat.tob = NOW - timedelta(seconds=started_seconds_ago)
    broker.set_stat(Stat.get_key(cluster_id), SignedPackage.dumps(stat, True), 60)


def make_queued_run(tenant: Tenant, user: Any, *, seconds_ago: float, status: str = RunStatus.QUEUED) -> Run:
    session = Session.objects.create(tenant=tenant, agent=make_agent(tenant=tenant), created_by=user)
    run = Run.objects.create(
        tenant=tenant, session=session, agent=session.agent, created_by=user, status=status
    )
    Run.objects.filter(pk=run.pk).update(created_at=NOW - timedelta(seconds=seconds_ago))
    return run


def test_admin_sees_clusters_queue_depth_and_the_tenants_oldest_queued_run(cast: Cast, broker: ORM) -> None:
    publish_cluster(
        broker, cluster_id="b-cluster", host="worker-2", status=Conf.WORKING, started_seconds_ago=30.25
    )
    publish_cluster(
        broker, cluster_id="a-cluster", host="worker-1", status=Conf.IDLE, started_seconds_ago=3600
    )
    broker.enqueue("task one")
    broker.enqueue("task two")
    make_queued_run(cast.tenant_a, cast.bob, seconds_ago=42.5)
    make_queued_run(cast.tenant_a, cast.alice, seconds_ago=7)
    make_queued_run(cast.tenant_a, cast.bob, seconds_ago=600, status=RunStatus.EXECUTING)
    make_queued_run(cast.tenant_a, cast.bob, seconds_ago=900, status=RunStatus.COMPLETED)
    admin_api = api_client_for(cast.tenant_a, make_user("adam@a.test", tenant=cast.tenant_a, role=Role.ADMIN))

    response = admin_api.get("/api/v1/workers/")

    assert response.status_code == 200, response.content
    assert response.json() == {
        "clusters": [
            {
                "cluster_id": "a-cluster",
                "host": "worker-1",
                "pid": 4100,
                "status": "idle",
                "workers": [4101, 4102],
                "task_queue_size": 3,
                "uptime_seconds": 3600.0,
            },
            {
                "cluster_id": "b-cluster",
                "host": "worker-2",
                "pid": 4100,
                "status": "working",
                "workers": [4101, 4102],
                "task_queue_size": 3,
                "uptime_seconds": 30.25,
            },
        ],
        "queue_depth": 2,
        "queued_runs": 2,
        "oldest_queued_run_age_seconds": 42.5,
    }


def test_no_clusters_and_no_queued_runs(cast: Cast, alice_api: APIClient, broker: ORM) -> None:
    response = alice_api.get("/api/v1/workers/")

    assert response.status_code == 200, response.content
    assert response.json() == {
        "clusters": [],
        "queue_depth": 0,
        "queued_runs": 0,
        "oldest_queued_run_age_seconds": None,
    }


def test_queued_runs_are_counted_per_tenant(
    cast: Cast, alice_api: APIClient, carol_api: APIClient, broker: ORM
) -> None:
    make_queued_run(cast.tenant_a, cast.bob, seconds_ago=10)
    make_queued_run(cast.tenant_b, cast.carol, seconds_ago=300)
    make_queued_run(cast.tenant_b, cast.carol, seconds_ago=20)

    tenant_a_body = alice_api.get("/api/v1/workers/").json()
    tenant_b_body = carol_api.get("/api/v1/workers/").json()

    assert (tenant_a_body["queued_runs"], tenant_a_body["oldest_queued_run_age_seconds"]) == (1, 10.0)
    assert (tenant_b_body["queued_runs"], tenant_b_body["oldest_queued_run_age_seconds"]) == (2, 300.0)


@pytest.mark.parametrize("client_fixture", ["bob_api", "victor_api"])
def test_members_and_viewers_are_refused(
    cast: Cast, broker: ORM, request: pytest.FixtureRequest, client_fixture: str
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


def test_anonymous_requests_are_refused(cast: Cast, broker: ORM) -> None:
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
    cast: Cast, alice_api: APIClient, broker: ORM
) -> None:
    publish_cluster(broker, cluster_id="odd", host="worker-1", status="Rebooting", started_seconds_ago=1)

    clusters = alice_api.get("/api/v1/workers/").json()["clusters"]

    assert [(cluster["cluster_id"], cluster["status"]) for cluster in clusters] == [("odd", "unknown")]
