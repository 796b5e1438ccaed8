"""A team's file quota holds against uploads that arrive at the same moment: each is counted in
the transaction that stores it, so no two of them can spend the same room."""

import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from files.models import StoredFile
from tests.conftest import Cast, api_client_for
from tests.factories import make_agent
from tests.files.test_files_api import attach, start_session

pytestmark = pytest.mark.django_db(transaction=True)

UPLOADS = 10
FILE_BYTES = 1000
ROOM_FOR = 5


def test_concurrent_uploads_never_take_more_than_the_team_quota(
    cast: Cast, settings: Any, files_root: Path
) -> None:
    settings.FILES_MAX_TENANT_BYTES = ROOM_FOR * FILE_BYTES
    api = api_client_for(cast.tenant_a, cast.alice)
    session_id = start_session(api, make_agent(tenant=cast.tenant_a, model_provider="offline").pk)
    clients = [api_client_for(cast.tenant_a, cast.alice) for _ in range(UPLOADS)]
    start = threading.Barrier(UPLOADS)
    statuses: list[int] = []

    def upload(number: int) -> None:
        try:
            start.wait(timeout=20)
            response = attach(
                clients[number], session_id, f"note-{number}.txt", b"%03d" % number * 333 + b"\n"
            )
            statuses.append(response.status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=upload, args=(number,)) for number in range(UPLOADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    blobs = [path for path in (files_root / "tenants" / str(cast.tenant_a.pk)).glob("*") if path.is_file()]
    assert sorted(statuses) == [201] * ROOM_FOR + [413] * (UPLOADS - ROOM_FOR)
    assert (
        list(StoredFile.objects.filter(tenant=cast.tenant_a).values_list("size", flat=True))
        == [FILE_BYTES] * ROOM_FOR
    )
    assert len(blobs) == ROOM_FOR  # a refused upload leaves no bytes behind
