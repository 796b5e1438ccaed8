"""The lane, cancel, retry, approvals, idempotency and quotas, executed in-process."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from sessions.models import Message, Run, RunEvent, Step, ToolApproval
from sessions.sweeper import sweep_runs
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import wait_until

SLOW_TEXT = Turn(text="slow " * 400, chunk_size=5, chunk_delay=0.02)


def start_session(api: APIClient, agent_id: object) -> str:
    return str(api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json").json()["id"])


def post(api: APIClient, session_id: str, content: str, **extra: object) -> object:
    return api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": content, **extra}, format="json")


def run_in_thread(run_id: str) -> threading.Thread:
    def target() -> None:
        try:
            execute_run(run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def wait_for_streaming(run_id: str) -> None:
    wait_until(
        lambda: RunEvent.objects.filter(run_id=run_id, type="text.delta").exists(),
        timeout=10,
        message="the model to start streaming",
    )


@pytest.mark.django_db(transaction=True)
def test_cancel_during_a_slow_stream_stops_within_two_seconds_and_closes_the_stream(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(SLOW_TEXT)
    session_id = start_session(bob_api, agent.pk)
    run_id = post(bob_api, session_id, "tell me a long story").json()["run"]["id"]  # type: ignore[attr-defined]
    worker = run_in_thread(run_id)
    wait_for_streaming(run_id)

    requested_at = time.monotonic()
    response = bob_api.post(f"/api/v1/runs/{run_id}/cancel/")
    wait_until(lambda: Run.objects.get(pk=run_id).status == "cancelled", timeout=5, interval=0.01)
    elapsed = time.monotonic() - requested_at
    worker.join(timeout=10)

    assert response.status_code == 202
    assert response.json()["status"] == "cancelling"
    assert elapsed < 2.0
    assert fake_model.wait_for_closed_streams(1, timeout=5) == 1
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert RunEvent.objects.filter(run_id=run_id).order_by("-seq").first().type == "run.cancelled"  # type: ignore[union-attr]
    assert not Step.objects.filter(run_id=run_id, status__in=["pending", "running"]).exists()


@pytest.mark.django_db(transaction=True)
def test_reject_answers_409_naming_the_active_run_and_interrupt_replaces_it(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(SLOW_TEXT, match="first")
    fake_model.script(Turn(text="second answer"), match="second")
    session_id = start_session(bob_api, agent.pk)
    first = post(bob_api, session_id, "first").json()["run"]["id"]  # type: ignore[attr-defined]
    worker = run_in_thread(first)
    wait_for_streaming(first)

    rejected = post(bob_api, session_id, "rejected one", multitask="reject")
    interrupted = post(bob_api, session_id, "second", multitask="interrupt")
    worker.join(timeout=10)
    second = interrupted.json()["run"]["id"]  # type: ignore[attr-defined]
    execute_run(second)

    assert rejected.status_code == 409  # type: ignore[attr-defined]
    assert rejected.json()["error"]["code"] == "run_active"  # type: ignore[attr-defined]
    assert rejected.json()["error"]["fields"] == {"active_run": [first]}  # type: ignore[attr-defined]
    assert Message.objects.filter(content__0__text="rejected one").count() == 0
    assert Run.objects.get(pk=first).status == "cancelled"
    assert (Run.objects.get(pk=second).status, Run.objects.get(pk=second).stop_reason) == (
        "completed",
        "end_turn",
    )


@pytest.mark.django_db
def test_idempotency_key_returns_the_same_message_and_run(cast: Cast, bob_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)
    headers = {"HTTP_IDEMPOTENCY_KEY": "client-retry-1"}

    first = bob_api.post(
        f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json", **headers
    )
    repeat = bob_api.post(
        f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json", **headers
    )
    other = bob_api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json")

    assert (first.status_code, repeat.status_code) == (202, 202)
    assert repeat.json()["run"]["id"] == first.json()["run"]["id"]
    assert repeat.json()["message"]["id"] == first.json()["message"]["id"]
    assert other.json()["run"]["id"] != first.json()["run"]["id"]
    assert (Message.objects.count(), Run.objects.count()) == (2, 2)


@pytest.mark.django_db
def test_idempotency_key_expires_after_the_window(cast: Cast, bob_api: APIClient, settings: object) -> None:
    from sessions.models import IdempotencyRecord

    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)
    headers = {"HTTP_IDEMPOTENCY_KEY": "k"}
    first = bob_api.post(
        f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json", **headers
    )
    IdempotencyRecord.objects.update(created_at=timezone.now() - timedelta(hours=25))

    later = bob_api.post(
        f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json", **headers
    )

    assert later.json()["run"]["id"] != first.json()["run"]["id"]


@pytest.mark.django_db
def test_retry_a_failed_run_answers_the_same_message_again(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    settings.MODEL_MAX_RETRIES = 0  # type: ignore[attr-defined]
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(Turn(error_status=500), Turn(text="second time lucky"))
    session_id = start_session(bob_api, agent.pk)
    posted = post(bob_api, session_id, "please").json()  # type: ignore[attr-defined]
    execute_run(posted["run"]["id"])
    assert Run.objects.get(pk=posted["run"]["id"]).status == "failed"

    response = bob_api.post(f"/api/v1/runs/{posted['run']['id']}/retry/")
    retry_id = response.json()["id"]
    execute_run(retry_id)

    assert response.status_code == 202
    retry = Run.objects.get(pk=retry_id)
    assert (retry.status, str(retry.retry_of_id), str(retry.user_message_id)) == (
        "completed",
        posted["run"]["id"],
        posted["message"]["id"],
    )
    assert bob_api.post(f"/api/v1/runs/{posted['run']['id']}/retry/").status_code == 400
    assert (
        bob_api.post(f"/api/v1/runs/{retry_id}/retry/").status_code == 400
    )  # completed runs are not retried
    texts = [m.text for m in Message.objects.filter(session_id=session_id, role="assistant")]
    assert texts == ["second time lucky"]
    assert fake_model.requests[-1].body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "please"}]}
    ]


@pytest.mark.django_db
def test_a_retry_leaves_the_failed_attempts_partial_answer_out_of_the_context(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    settings.MODEL_MAX_RETRIES = 0  # type: ignore[attr-defined]
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "1+1"})]), Turn(error_status=500), Turn(text="2")
    )
    session_id = start_session(bob_api, agent.pk)
    run_id = post(bob_api, session_id, "1+1?").json()["run"]["id"]  # type: ignore[attr-defined]
    execute_run(run_id)

    retry_id = bob_api.post(f"/api/v1/runs/{run_id}/retry/").json()["id"]
    execute_run(retry_id)

    assert Run.objects.get(pk=run_id).status == "failed"
    assert Run.objects.get(pk=retry_id).status == "completed"
    assert [m["role"] for m in fake_model.requests[-1].body["messages"]] == ["user"]
    assert Message.objects.filter(session_id=session_id).count() == 4  # user, call, result (kept), answer


def approval_setup(cast: Cast, api: APIClient, fake_model: FakeModelServer) -> str:
    agent = make_agent(
        tenant=cast.tenant_a, model_provider="anthropic", approval_required_tools=["calculator"]
    )
    fake_model.script(Turn(tool_calls=[("calculator", {"expression": "6*7"})]), Turn(text="done"))
    session_id = start_session(api, agent.pk)
    run_id: str = post(api, session_id, "6*7 please").json()["run"]["id"]  # type: ignore[attr-defined]
    execute_run(run_id)
    return run_id


def tool_call_id_of(run_id: str) -> str:
    return ToolApproval.objects.get(run_id=run_id).tool_call_id


@pytest.mark.django_db
def test_a_tool_that_needs_approval_waits_then_runs_when_approved(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = approval_setup(cast, bob_api, fake_model)
    waiting = bob_api.get(f"/api/v1/runs/{run_id}/").json()
    required = RunEvent.objects.get(run_id=run_id, type="approval.required")

    response = bob_api.post(
        f"/api/v1/runs/{run_id}/approve/",
        {"tool_call_id": tool_call_id_of(run_id), "decision": "approve", "reason": "fine"},
        format="json",
    )
    assert Run.objects.get(pk=run_id).status == "queued"
    execute_run(run_id)

    assert waiting["status"] == "awaiting_approval"
    assert (required.data["name"], required.data["arguments"]) == ("calculator", {"expression": "6*7"})
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["decided_by"]) == ("approved", "bob@a.test")
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("completed", "end_turn")
    assert Step.objects.get(run_id=run_id, kind="tool_call").output == {"content": "42", "is_error": False}
    resolved = RunEvent.objects.get(run_id=run_id, type="approval.resolved").data
    assert (resolved["decision"], resolved["decided_by"]) == ("approve", "bob@a.test")


@pytest.mark.django_db
def test_cancelling_a_run_that_waits_for_approval_ends_it_at_once(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    """No worker holds a run that waits for people: the cancel itself finishes it."""
    run_id = approval_setup(cast, bob_api, fake_model)

    response = bob_api.post(f"/api/v1/runs/{run_id}/cancel/")
    late_approval = bob_api.post(
        f"/api/v1/runs/{run_id}/approve/",
        {"tool_call_id": tool_call_id_of(run_id), "decision": "approve"},
        format="json",
    )

    assert response.status_code == 202
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert RunEvent.objects.filter(run_id=run_id, type="run.cancelled").count() == 1
    assert late_approval.status_code == 400
    assert late_approval.json()["error"]["fields"] == {
        "tool_call_id": ["This run is cancelled: it no longer waits for a decision."]
    }
    assert ToolApproval.objects.get(run_id=run_id).status == "pending"
    assert Run.objects.get(pk=run_id).status == "cancelled"
    assert not Step.objects.filter(run_id=run_id, kind="tool_call").exists()


@pytest.mark.django_db
def test_the_sweeper_ends_a_cancelling_run_that_no_worker_holds(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    """Left by an earlier version, which asked a run waiting for approval to stop and waited."""
    run_id = approval_setup(cast, bob_api, fake_model)
    Run.objects.filter(pk=run_id).update(status="cancelling")

    report = sweep_runs()

    assert report.failed == 0
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason, run.lease_expires_at) == ("cancelled", "cancelled", None)


@pytest.mark.django_db
def test_a_denied_call_goes_back_to_the_model_as_a_denial(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = approval_setup(cast, bob_api, fake_model)

    bob_api.post(
        f"/api/v1/runs/{run_id}/approve/",
        {"tool_call_id": tool_call_id_of(run_id), "decision": "deny", "reason": "not now"},
        format="json",
    )
    execute_run(run_id)

    assert Run.objects.get(pk=run_id).status == "completed"
    assert not Step.objects.filter(run_id=run_id, kind="tool_call").exists()
    last_request = fake_model.requests[-1].body["messages"][-1]["content"][0]
    assert last_request["is_error"] is True
    assert "The user denied this tool call. Reason: not now" in str(last_request["content"])
    approval = ToolApproval.objects.get(run_id=run_id)
    assert (approval.status, approval.decided_by.email) == ("denied", "bob@a.test")  # type: ignore[union-attr]


@pytest.mark.django_db
def test_an_unanswered_approval_expires_and_the_default_applies(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    settings.APPROVAL_DEFAULT_DECISION = "deny"  # type: ignore[attr-defined]
    run_id = approval_setup(cast, bob_api, fake_model)
    ToolApproval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    report = sweep_runs()
    execute_run(run_id)

    assert (report.approvals_expired, report.resumed) == (1, 1)
    approval = ToolApproval.objects.get(run_id=run_id)
    assert (approval.status, approval.decision, approval.decided_by) == ("expired", "deny", None)
    assert Run.objects.get(pk=run_id).status == "completed"
    assert "the approval request expired" in str(fake_model.requests[-1].body["messages"][-1]["content"])


@pytest.mark.django_db
def test_approving_twice_or_an_unknown_call_is_400(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = approval_setup(cast, bob_api, fake_model)
    call_id = tool_call_id_of(run_id)
    url = f"/api/v1/runs/{run_id}/approve/"

    first = bob_api.post(url, {"tool_call_id": call_id, "decision": "approve"}, format="json")
    second = bob_api.post(url, {"tool_call_id": call_id, "decision": "deny"}, format="json")
    unknown = bob_api.post(url, {"tool_call_id": "nope", "decision": "approve"}, format="json")
    bad = bob_api.post(url, {"tool_call_id": call_id, "decision": "maybe"}, format="json")

    assert (first.status_code, second.status_code, unknown.status_code, bad.status_code) == (
        200,
        400,
        400,
        400,
    )
    assert second.json()["error"]["fields"] == {"tool_call_id": ["This tool call was already approved."]}
    assert ToolApproval.objects.get(run_id=run_id).decision == "approve"


@pytest.mark.django_db
def test_another_tenant_cannot_approve_or_retry(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer
) -> None:
    run_id = approval_setup(cast, bob_api, fake_model)
    call_id = tool_call_id_of(run_id)

    approve = carol_api.post(
        f"/api/v1/runs/{run_id}/approve/", {"tool_call_id": call_id, "decision": "approve"}, format="json"
    )
    retry = carol_api.post(f"/api/v1/runs/{run_id}/retry/")

    assert (approve.status_code, retry.status_code) == (404, 404)
    assert ToolApproval.objects.get(run_id=run_id).status == "pending"
    assert Run.objects.filter(retry_of_id=run_id).count() == 0


@pytest.mark.django_db
def test_message_rate_limit_answers_429_with_retry_after_and_stores_nothing(
    cast: Cast, bob_api: APIClient
) -> None:
    cast.tenant_a.settings = {"messages_per_minute_per_user": 2}
    cast.tenant_a.save()
    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)
    post(bob_api, session_id, "one")
    post(bob_api, session_id, "two")

    limited = post(bob_api, session_id, "three")

    assert limited.status_code == 429  # type: ignore[attr-defined]
    assert limited.json()["error"]["code"] == "rate_limited"  # type: ignore[attr-defined]
    assert 1 <= int(limited["Retry-After"]) <= 60  # type: ignore[index]
    assert Message.objects.count() == 2
    Run.objects.update(created_at=timezone.now() - timedelta(seconds=61))
    assert post(bob_api, session_id, "four").status_code == 202  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_active_runs_limit_answers_429(cast: Cast, bob_api: APIClient) -> None:
    cast.tenant_a.settings = {"active_runs_per_user": 1}
    cast.tenant_a.save()
    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)
    run_id = post(bob_api, session_id, "one").json()["run"]["id"]  # type: ignore[attr-defined]
    Run.objects.filter(pk=run_id).update(status="executing")

    limited = post(bob_api, session_id, "two")
    Run.objects.filter(pk=run_id).update(status="completed")

    assert limited.status_code == 429  # type: ignore[attr-defined]
    assert int(limited["Retry-After"]) >= 1  # type: ignore[index]
    assert post(bob_api, session_id, "three").status_code == 202  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_a_run_past_its_wall_clock_limit_ends_timeout(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", run_timeout_seconds=1)
    fake_model.script(SLOW_TEXT)
    session_id = start_session(bob_api, agent.pk)
    run_id = post(bob_api, session_id, "take your time").json()["run"]["id"]  # type: ignore[attr-defined]

    started = time.monotonic()
    execute_run(run_id)
    elapsed = time.monotonic() - started

    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("timeout", "timeout")
    assert 1.0 <= elapsed < 3.0
    assert fake_model.wait_for_closed_streams(1, timeout=5) == 1
    assert RunEvent.objects.filter(run_id=run_id).order_by("-seq").first().type == "run.timeout"  # type: ignore[union-attr]


@pytest.mark.django_db
def test_a_tenant_default_wall_clock_limit_applies_when_the_agent_sets_none(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    cast.tenant_a.settings = {"run_timeout_seconds": 1}
    cast.tenant_a.save()
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(SLOW_TEXT)
    session_id = start_session(bob_api, agent.pk)
    run_id = post(bob_api, session_id, "take your time").json()["run"]["id"]  # type: ignore[attr-defined]

    execute_run(run_id)

    assert Run.objects.get(pk=run_id).stop_reason == "timeout"
