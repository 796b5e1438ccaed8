"""Sessions, messages and runs through the API, executed in-process by the task function."""

import psycopg
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from sessions.models import Message, Run, RunEvent, Session, Step
from sessions.run_end import run_finish
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent, make_run
from tests.fake_model_server import FakeModelServer, Turn

pytestmark = pytest.mark.django_db


def start_session(api: APIClient, agent_id: object) -> str:
    response = api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json")
    assert response.status_code == 201, response.content
    return str(response.json()["id"])


def post_message(api: APIClient, session_id: str, content: str) -> dict[str, object]:
    response = api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": content}, format="json")
    assert response.status_code == 202, response.content
    body: dict[str, object] = response.json()
    return body


def run_to_end(api: APIClient, run_id: str) -> dict[str, object]:
    execute_run(run_id)
    body: dict[str, object] = api.get(f"/api/v1/runs/{run_id}/").json()
    return body


def event_types(run_id: str) -> list[str]:
    """The run's event types, with each burst of coalesced deltas shown once."""
    types: list[str] = []
    for event_type in RunEvent.objects.filter(run_id=run_id).order_by("seq").values_list("type", flat=True):
        if not (event_type.endswith(".delta") and types and types[-1] == event_type):
            types.append(event_type)
    return types


TOOL_ROUND_TRIP = [
    Turn(text="Let me calculate.", tool_calls=[("calculator", {"expression": "6*7"})], usage=(20, 10, 5, 0)),
    Turn(text="6*7 is 42.", usage=(40, 8, 0, 3)),
]


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_message_runs_model_tool_model_to_completion(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, provider: str
) -> None:
    agent = make_agent(
        tenant=cast.tenant_a, model_provider=provider, model_name="test-model", temperature=0.5
    )
    fake_model.script(*TOOL_ROUND_TRIP)
    session_id = start_session(bob_api, agent.pk)

    posted = post_message(bob_api, session_id, "What is 6*7?")
    run = run_to_end(bob_api, posted["run"]["id"])  # type: ignore[index]

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert [(step["kind"], step["status"]) for step in run["steps"]] == [  # type: ignore[attr-defined]
        ("model_call", "completed"),
        ("tool_call", "completed"),
        ("model_call", "completed"),
    ]
    tool_step = run["steps"][1]  # type: ignore[index]
    assert tool_step["output"] == {"content": "42", "is_error": False}
    assert run["usage"] == {
        "input_tokens": 60,
        "output_tokens": 18,
        "cache_read_tokens": 5,
        "cache_write_tokens": 3,
        "total_tokens": 78,
    }
    steps = Step.objects.filter(run_id=run["id"])
    assert sum(step.input_tokens for step in steps) == 60
    assert sum(step.output_tokens for step in steps) == 18
    assert {step.tenant_id for step in steps} == {cast.tenant_a.pk}  # read by the tenant's quotas
    second_request = fake_model.requests[1].body
    assert second_request["model"] == "test-model"
    messages = bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    assert [message["role"] for message in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[-1]["text"] == "6*7 is 42."


def test_events_are_gap_free_and_in_order(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(*TOOL_ROUND_TRIP)
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "What is 6*7?")["run"]["id"]  # type: ignore[index]

    run_to_end(bob_api, run_id)

    seqs = list(RunEvent.objects.filter(session_id=session_id).order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))
    assert Session.objects.get(pk=session_id).last_event_seq == len(seqs)
    assert event_types(run_id) == [
        "run.queued",
        "run.status",
        "run.started",
        "run.status",
        "step.started",
        "message.started",
        "text.delta",
        "message.completed",
        "step.completed",
        "usage",
        "step.started",
        "tool.call",
        "tool.result",
        "step.completed",
        "step.started",
        "message.started",
        "text.delta",
        "message.completed",
        "step.completed",
        "usage",
        "run.status",
        "run.completed",
    ]
    listed = bob_api.get(f"/api/v1/runs/{run_id}/events/?after=3").json()
    assert [event["seq"] for event in listed["results"]] == seqs[3:]
    assert listed["next"] is None
    completed = listed["results"][-1]
    assert completed["type"] == "run.completed"
    assert completed["data"]["usage"]["total_tokens"] == 78
    assert set(completed) == {"seq", "session_id", "run_id", "type", "ts", "data"}


def test_offline_agent_answers_with_a_tool_round_trip(cast: Cast, bob_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "what is 12*7?")["run"]["id"]  # type: ignore[index]

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert [step["kind"] for step in run["steps"]] == ["model_call", "tool_call", "model_call"]  # type: ignore[attr-defined]
    assert run["steps"][1]["output"]["content"] == "84"  # type: ignore[index]
    final = Message.objects.filter(run_id=run_id, role="assistant").order_by("-position").first()
    assert final is not None and "84" in final.text


def test_an_offline_agent_of_the_default_planning_mode_answers_arithmetic_with_its_tools_in_its_loop(
    cast: Cast, bob_api: APIClient
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline", planning_mode="auto")
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "What is 12*7?")["run"]["id"]  # type: ignore[index]

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["route"], run["model_calls"]) == ("completed", "", 2)
    assert [step["kind"] for step in run["steps"]] == ["model_call", "tool_call", "model_call"]  # type: ignore[attr-defined]
    assert run["steps"][1]["output"]["content"] == "84"  # type: ignore[index]


def test_max_steps_ends_a_looping_model(cast: Cast, bob_api: APIClient, fake_model: FakeModelServer) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", max_steps=2)
    fake_model.set_default(Turn(tool_calls=[("current_time", {})]))
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "loop forever")["run"]["id"]  # type: ignore[index]

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("completed", "max_steps")
    assert run["model_calls"] == 2
    assert len(fake_model.requests) == 2


def test_rate_limit_then_success_is_retried(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(Turn(error_status=429), Turn(text="fine"))
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "hello")["run"]["id"]  # type: ignore[index]

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    assert len(fake_model.requests) == 2


def test_provider_that_keeps_failing_ends_failed_with_the_error(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, settings: object
) -> None:
    settings.MODEL_MAX_RETRIES = 1  # type: ignore[attr-defined]
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.set_default(Turn(error_status=529))
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "hello")["run"]["id"]  # type: ignore[index]

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("failed", "llm_error")
    assert "overloaded" in str(run["error"]).lower()
    assert len(fake_model.requests) == 2
    assert run["steps"][0]["status"] == "failed"  # type: ignore[index]
    assert event_types(run_id)[-1] == "run.failed"


def test_missing_provider_key_fails_the_run_clearly(cast: Cast, bob_api: APIClient, settings: object) -> None:
    settings.ANTHROPIC_API_KEY = ""  # type: ignore[attr-defined]
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "hello")["run"]["id"]  # type: ignore[index]

    run = run_to_end(bob_api, run_id)

    assert (run["status"], run["stop_reason"]) == ("failed", "llm_error")
    assert run["error"] == "No API key for anthropic: set ANTHROPIC_API_KEY or store a key for this tenant."


def test_tenant_provider_key_is_used_instead_of_the_platform_key(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    from tenants.models import ProviderKey

    ProviderKey.objects.create(tenant=cast.tenant_a, provider="anthropic", api_key="sk-ant-tenant-own-key")
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    fake_model.script(Turn(text="hi"))
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "hello")["run"]["id"]  # type: ignore[index]

    run_to_end(bob_api, run_id)

    headers = fake_model.requests[0].headers
    sent_key = headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")
    assert sent_key == "sk-ant-tenant-own-key"


def test_second_message_waits_for_the_first(cast: Cast, bob_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(bob_api, agent.pk)
    first = post_message(bob_api, session_id, "first")["run"]["id"]  # type: ignore[index]
    second_post = post_message(bob_api, session_id, "second")
    second = second_post["run"]["id"]  # type: ignore[index]

    assert second_post["message"]["is_queued"] is True  # type: ignore[index]
    execute_run(second)  # not next in the lane: left alone
    assert Run.objects.get(pk=second).status == "queued"
    session = bob_api.get(f"/api/v1/sessions/{session_id}/").json()
    assert (session["status"], session["active_run"], session["queue"]) == ("queued", None, [first, second])

    execute_run(first)
    execute_run(second)

    texts = [
        (m["role"], m["text"][:6])
        for m in bob_api.get(f"/api/v1/sessions/{session_id}/messages/").json()["results"]
    ]
    assert [role for role, _ in texts] == ["user", "assistant", "user", "assistant"]
    assert texts[0][1] == "first" and texts[2][1] == "second"


def test_cancel_a_queued_run_means_it_never_starts(cast: Cast, bob_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "hello")["run"]["id"]  # type: ignore[index]

    response = bob_api.post(f"/api/v1/runs/{run_id}/cancel/")
    execute_run(run_id)

    assert response.status_code == 202
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason, run.model_calls) == ("cancelled", "cancelled", 0)


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"content": ""}, "content", "Message cannot be empty."),
        ({"content": "  "}, "content", "Message cannot be empty."),
        ({"content": 5}, "content", "Must be a string."),
        ({"text": "hi"}, "text", "Unknown field."),
        ({"content": "x" * 100_001}, "content", "Ensure this field has no more than 100000 characters."),
    ],
)
def test_bad_messages_get_400_and_store_nothing(
    cast: Cast, bob_api: APIClient, payload: dict[str, object], field: str, message: str
) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)

    response = bob_api.post(f"/api/v1/sessions/{session_id}/messages/", payload, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["fields"][field] == [message]
    assert (Message.objects.count(), Run.objects.count()) == (0, 0)


def test_viewer_reads_sessions_but_cannot_chat(cast: Cast, bob_api: APIClient, victor_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)

    assert victor_api.get(f"/api/v1/sessions/{session_id}/").status_code == 200
    assert victor_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json").status_code == 403
    response = victor_api.post(f"/api/v1/sessions/{session_id}/messages/", {"content": "hi"}, format="json")
    assert response.status_code == 403
    assert Message.objects.count() == 0


def test_member_cannot_post_into_another_members_session(
    cast: Cast, bob_api: APIClient, alice_api: APIClient
) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    alices_session = start_session(alice_api, agent.pk)

    response = bob_api.post(f"/api/v1/sessions/{alices_session}/messages/", {"content": "hi"}, format="json")

    assert response.status_code == 403
    assert Message.objects.count() == 0


def test_session_with_another_tenants_agent_is_404(cast: Cast, carol_api: APIClient) -> None:
    agent = make_agent(tenant=cast.tenant_a)

    response = carol_api.post("/api/v1/sessions/", {"agent": str(agent.pk)}, format="json")

    assert response.status_code == 404
    assert Session.objects.count() == 0


@pytest.mark.parametrize(
    ("method", "path", "payload"),
    [
        ("get", "/api/v1/sessions/{session}/", None),
        ("delete", "/api/v1/sessions/{session}/", None),
        ("get", "/api/v1/sessions/{session}/messages/", None),
        ("post", "/api/v1/sessions/{session}/messages/", {"content": "hi"}),
        ("get", "/api/v1/sessions/{session}/events/", None),
        ("get", "/api/v1/runs/{run}/", None),
        ("get", "/api/v1/runs/{run}/events/", None),
        ("post", "/api/v1/runs/{run}/cancel/", None),
    ],
)
def test_another_tenants_sessions_and_runs_are_404_and_unchanged(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, method: str, path: str, payload: object
) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    session_id = start_session(bob_api, agent.pk)
    run_id = post_message(bob_api, session_id, "private")["run"]["id"]  # type: ignore[index]
    before = (
        Session.objects.count(),
        Message.objects.count(),
        Run.objects.get(pk=run_id).status,
        RunEvent.objects.count(),
    )

    response = getattr(carol_api, method)(path.format(session=session_id, run=run_id), payload, format="json")

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    after = (
        Session.objects.count(),
        Message.objects.count(),
        Run.objects.get(pk=run_id).status,
        RunEvent.objects.count(),
    )
    assert after == before
    assert carol_api.get("/api/v1/sessions/").json()["count"] == 0


def test_session_list_uses_a_constant_number_of_queries(cast: Cast, bob_api: APIClient) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    agent = make_agent(tenant=cast.tenant_a)
    start_session(bob_api, agent.pk)
    bob_api.get("/api/v1/sessions/")
    with CaptureQueriesContext(connection) as one:
        bob_api.get("/api/v1/sessions/")
    for _ in range(4):
        start_session(bob_api, agent.pk)
    with CaptureQueriesContext(connection) as five:
        bob_api.get("/api/v1/sessions/")

    assert len(five) == len(one)


@pytest.mark.parametrize(
    ("content", "expected_by_vendor"),
    [
        # the offline model is free, so no price is read; branches (sessions.branches): a post reads
        # the conversation's tree once, for the end of the branch shown and its message's siblings
        # (2: its messages, its runs' start times), a run its branch's path (1). A claim reads its
        # run with its stored steps and locks its session in one statement (1), and moves it
        # queued → planning → executing in one (1). A post's API key is read with its creator's
        # role in one statement (1). A run's end reads it again with whether it has children (1),
        # and commits with its last answer (sessions.recorder: DjangoRunRecorder.loop_ends).
        ("hello there", {"postgresql": (14, 31), "sqlite": (15, 31)}),
        # model call → calculator → model call; the calculator is read-only and quick, so on
        # PostgreSQL its start is stored with its end (sessions.recorder: held steps)
        ("What is 12*7?", {"postgresql": (14, 57), "sqlite": (15, 57)}),
    ],
    ids=["plain", "one tool call"],
)
@pytest.mark.django_db(transaction=True)  # outside a transaction, as a worker runs: no savepoints
def test_posting_and_running_a_message_take_a_fixed_number_of_statements(
    cast: Cast, bob_api: APIClient, content: str, expected_by_vendor: dict[str, tuple[int, int]]
) -> None:
    """The hot path's reads and writes, counted: a change that adds one shows up here.

    The same statements on both databases; SQLite's transactions send BEGIN as a statement
    of their own (PostgreSQL's go with the first statement).
    """
    agent = make_agent(tenant=cast.tenant_a, model_provider="offline")
    warm_up_session = start_session(bob_api, agent.pk)
    execute_run(post_message(bob_api, warm_up_session, "warm up")["run"]["id"])  # type: ignore[index]
    session_id = start_session(bob_api, agent.pk)

    with CaptureQueriesContext(connection) as posting:
        run_id = post_message(bob_api, session_id, content)["run"]["id"]  # type: ignore[index]
    with CaptureQueriesContext(connection) as running:
        execute_run(str(run_id))

    assert Run.objects.get(pk=run_id).status == "completed"
    assert (len(posting), len(running)) == expected_by_vendor[connection.vendor]


def backends_waiting_on_a_lock() -> int:
    """How many of this database's connections wait for a lock, read on a connection of its own."""
    settings_dict = connection.settings_dict
    with psycopg.connect(
        dbname=settings_dict["NAME"],
        user=settings_dict["USER"],
        host=settings_dict["HOST"],
        port=settings_dict["PORT"] or 5432,
        autocommit=True,
    ) as observer:
        row = observer.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
@pytest.mark.parametrize("unstorable", ["\x00", "\ud800"])
def test_a_model_answer_postgresql_could_not_store_completes_with_a_replacement_character(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, provider: str, unstorable: str
) -> None:
    """A NUL, or half of a surrogate pair, in a model's text or tool arguments: the run ends as it
    does on SQLite, each such character stored as U+FFFD."""
    agent = make_agent(tenant=cast.tenant_a, model_provider=provider, model_name="test-model")
    fake_model.script(
        Turn(
            text=f"Let me{unstorable} see.", tool_calls=[("calculator", {"expression": f"6*7{unstorable}"})]
        ),
        Turn(text=f"Done{unstorable}."),
    )
    session_id = start_session(bob_api, agent.pk)

    run = run_to_end(bob_api, post_message(bob_api, session_id, "Compute.")["run"]["id"])  # type: ignore[index]

    assert (run["status"], run["stop_reason"]) == ("completed", "end_turn")
    answers = Message.objects.filter(run_id=run["id"], role="assistant").order_by("position")
    assert [message.content[0]["text"] for message in answers] == ["Let me\ufffd see.", "Done\ufffd."]
    call = Step.objects.get(run_id=run["id"], kind="tool_call")
    assert call.input["arguments"] == {"expression": "6*7\ufffd"}
    deltas = RunEvent.objects.filter(run_id=run["id"], type="text.delta").order_by("seq")
    assert "".join(event.data["text"] for event in deltas) == "Let me\ufffd see.Done\ufffd."


def test_a_run_error_postgresql_could_not_store_is_kept_with_a_replacement_character(cast: Cast) -> None:
    run = make_run(agent=make_agent(tenant=cast.tenant_a), user=cast.bob)

    run_finish(run, status="failed", stop_reason="error", error="RuntimeError: boom\x00")

    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", "RuntimeError: boom\ufffd")
    failed = RunEvent.objects.get(run_id=run.pk, type="run.failed")
    assert failed.data["error"] == "RuntimeError: boom\ufffd"
