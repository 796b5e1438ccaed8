"""code_run inside real runs: the fake model calls it, the step holds stdout, a cancel kills it."""

import threading
import time
from pathlib import Path
from uuid import UUID

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from rest_framework.test import APIClient

from sessions.models import Run, RunEvent
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import wait_until
from tools.models import ToolPolicy
from tools.sandbox.bubblewrap import tasks_of_uid
from tools.sandbox.workspaces import sandbox_uid_for

CSV_AND_CHART = """
import pandas, matplotlib.pyplot as plt
sales = pandas.read_csv("attachments/sales.csv")
sales.plot(x="month", y="total").get_figure().savefig("output/sales.png")
print("total", sales["total"].sum())
"""
SALES_CSV = b"month,total\n1,10\n2,30\n"


def start_run(
    api: APIClient, cast: Cast, fake_model: FakeModelServer, *turns: Turn, attach: bytes = b""
) -> tuple[str, str]:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", model_name="test-model")
    ToolPolicy.objects.create(agent=agent, profile="coding")
    fake_model.script(*turns)
    session_id = api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").json()["id"]
    attachments = []
    if attach:
        upload = SimpleUploadedFile("sales.csv", attach)
        uploaded = api.post("/api/v1/files/", {"file": upload, "session": session_id}, format="multipart")
        attachments.append(uploaded.json()["id"])
    posted = api.post(
        f"/api/v1/sessions/{session_id}/messages/",
        {"content": "chart it", "attachments": attachments},
        format="json",
    )
    assert posted.status_code == 202, posted.content
    return str(session_id), str(posted.json()["run"]["id"])


@pytest.mark.django_db(transaction=True)  # the tool runs on a thread of its own, with its own connection
def test_a_run_calls_code_run_and_the_tool_step_holds_stdout(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    _session_id, run_id = start_run(
        bob_api,
        cast,
        fake_model,
        Turn(tool_calls=[("code_run", {"language": "python", "code": CSV_AND_CHART})]),
        Turn(text="The total is 40; the chart is sales.png."),
        attach=SALES_CSV,
    )

    execute_run(run_id)
    run = bob_api.get(f"/api/v1/runs/{run_id}/").json()

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    tool_step = run["steps"][1]
    assert tool_step["kind"] == "tool_call"
    assert tool_step["output"]["is_error"] is False
    content = tool_step["output"]["content"]
    assert content.startswith("exit code: 0\n\nstdout:\ntotal 40\n\nstderr:\n")
    assert "files in output/ (shown to the user with download links):\n- sales.png (image/png, " in content
    [chart] = run["artifacts"]
    assert (chart["name"], chart["content_type"]) == ("sales.png", "image/png")
    downloaded = bob_api.get(chart["download_url"])
    assert b"".join(downloaded.streaming_content).startswith(b"\x89PNG")  # type: ignore[attr-defined]


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_run_during_a_busy_loop_ends_it_within_two_seconds(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    settings.SANDBOX_CPU_SECONDS = 60  # type: ignore[attr-defined]
    settings.SANDBOX_WALL_SECONDS = 60.0  # type: ignore[attr-defined]
    session_id, run_id = start_run(
        bob_api,
        cast,
        fake_model,
        Turn(tool_calls=[("code_run", {"language": "python", "code": "while True:\n    pass"})]),
        Turn(text="never reached"),
    )
    worker = threading.Thread(target=execute_and_close, args=(run_id,), daemon=True)
    worker.start()
    wait_until(
        lambda: RunEvent.objects.filter(run_id=run_id, type="tool.call").exists(),
        timeout=10,
        message="the run to call code_run",
    )
    sandbox_uid = sandbox_uid_for(UUID(session_id))
    if sandbox_uid is not None:  # as root each session's sandbox has a uid of its own to look for
        wait_until(lambda: tasks_of_uid(sandbox_uid) > 0, timeout=10, message="the sandbox to start")

    requested_at = time.monotonic()
    response = bob_api.post(f"/api/v1/runs/{run_id}/cancel/")
    wait_until(lambda: Run.objects.get(pk=run_id).status == "cancelled", timeout=5, interval=0.01)
    elapsed = time.monotonic() - requested_at
    if sandbox_uid is not None:
        wait_until(
            lambda: running_tasks_of_uid(sandbox_uid) == 0, timeout=2, message="the sandbox to be killed"
        )
    worker.join(timeout=10)

    assert response.status_code == 202
    assert elapsed < 2.0
    assert not worker.is_alive()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")


def running_tasks_of_uid(uid: int) -> int:
    """The uid's tasks that still run: a killed sandbox's processes may stay zombies a moment,
    dead but not yet reaped by the host's init, which adopted them."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines() if ":" in line)
        except OSError:
            continue  # it ended while we looked
        if int(fields.get("Uid", "-1").split()[0]) == uid and not fields.get("State", "").strip().startswith(
            "Z"
        ):
            count += int(fields.get("Threads", "1"))
    return count


def execute_and_close(run_id: str) -> None:
    try:
        execute_run(run_id)
    finally:
        connection.close()
