"""The cast: tenant A with alice (owner), bob (member) and victor (viewer); tenant B with carol."""

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from core.outside_waits import on_pooled_thread
from tenants.models import Role, Tenant
from tests.factories import make_api_key, make_tenant, make_user
from tests.fake_model_server import FakeModelServer
from tests.live import UNREACHED_FAILURE_LIMITS, free_port
from tests.redis_server import REDIS_SERVER, PrivateRedis


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def failure_limits_the_suite_never_reaches(settings: Any) -> None:
    for name, limit in UNREACHED_FAILURE_LIMITS.items():
        setattr(settings, name, limit)


@pytest.fixture(scope="session")
def files_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("files")


@pytest.fixture(autouse=True)
def uploads_in_a_temporary_folder(settings: Any, files_root: Path) -> None:
    """Uploaded files land in the test run's temporary folder, never in the data folder."""
    settings.STORAGES = {
        **settings.STORAGES,
        "default": {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(files_root), "base_url": None},
        },
    }


@dataclass
class Cast:
    tenant_a: Tenant
    tenant_b: Tenant
    alice: Any
    bob: Any
    victor: Any
    carol: Any


@pytest.fixture
def cast(db: None) -> Cast:
    tenant_a = make_tenant("tenant-a")
    tenant_b = make_tenant("tenant-b")
    return Cast(
        tenant_a=tenant_a,
        tenant_b=tenant_b,
        alice=make_user("alice@a.test", tenant=tenant_a, role=Role.OWNER, password="alice-password"),
        bob=make_user("bob@a.test", tenant=tenant_a, role=Role.MEMBER, password="bob-password"),
        victor=make_user("victor@a.test", tenant=tenant_a, role=Role.VIEWER, password="victor-password"),
        carol=make_user("carol@b.test", tenant=tenant_b, role=Role.OWNER, password="carol-password"),
    )


def api_client_for(tenant: Tenant, user: Any, scope: str = "write") -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {make_api_key(tenant=tenant, user=user, scope=scope)}")
    return client


@pytest.fixture
def alice_api(cast: Cast) -> APIClient:
    return api_client_for(cast.tenant_a, cast.alice)


@pytest.fixture
def bob_api(cast: Cast) -> APIClient:
    return api_client_for(cast.tenant_a, cast.bob)


@pytest.fixture
def victor_api(cast: Cast) -> APIClient:
    return api_client_for(cast.tenant_a, cast.victor)


@pytest.fixture
def carol_api(cast: Cast) -> APIClient:
    return api_client_for(cast.tenant_b, cast.carol)


@pytest.fixture(scope="session")
def fake_model_server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as server:
        yield server


@pytest.fixture
def fake_model(fake_model_server: FakeModelServer, settings: Any) -> Iterator[FakeModelServer]:
    """The fake provider endpoint, clean for this test, with the platform keys pointed at it."""
    fake_model_server.reset()
    settings.ANTHROPIC_API_KEY = "test-anthropic-key"
    settings.ANTHROPIC_BASE_URL = fake_model_server.url
    settings.OPENAI_API_KEY = "test-openai-key"
    settings.OPENAI_BASE_URL = fake_model_server.openai_base_url
    yield fake_model_server
    fake_model_server.reset()


@pytest.fixture
def outside_waits_taken() -> Iterator[None]:
    """As a request on a pooled thread while other requests hold the pool's share for outside
    waits (core.outside_waits): a view that would wait on an outside service answers busy."""
    share = threading.BoundedSemaphore(1)
    share.acquire()
    with on_pooled_thread(share):
        yield


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis of the test's own (``tests.redis_server``), started and, at the end, stopped."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed: the test starts a Redis of its own")
    server = PrivateRedis(port=free_port(), log_path=tmp_path / "redis.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
