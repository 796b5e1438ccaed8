"""Live streaming over websockets and SSE against a live uvicorn (DESIGN.md §2 step 4, §4).

The test process emits events with ``emit_event``; the server process delivers them by
polling the store (embedded default) or through Redis pub/sub (``REDIS_URL``).
"""

import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import async_to_sync
from asgiref.testing import ApplicationCommunicator
from django.conf import settings as django_settings
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import AsyncRequestFactory, Client
from django.utils import timezone
from django_q.models import Schedule
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect
from websockets.typing import Subprotocol

from sessions.events import emit_event, session_group_name
from sessions.models import (
    Message,
    MessageRole,
    Run,
    RunEvent,
    RunStatus,
    Session,
    ToolApproval,
    UserQuestion,
)
from sessions.retention import RETENTION_SCHEDULE_NAME, ensure_retention_schedule, prune_run_events
from sessions.routing import websocket_application
from sessions.sse import session_event_stream
from tenants.models import Membership, Role
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

RECEIVE_TIMEOUT = 5.0
QUIET_SECONDS = 0.5
# A worker process starting on a busy CI host takes a while to pick up its first task.
WORKER_TIMEOUT = 30.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[LiveStack]:
    """One uvicorn for the module; rows committed by each test are visible to it."""
    live = LiveStack(Path(tmp_path_factory.mktemp("streaming")))
    live.start_server()
    yield live
    live.stop()


@dataclass
class World:
    cast: Cast
    session: Session
    run: Run
    alice_key: str
    victor_key: str
    carol_key: str


@pytest.fixture
def world(cast: Cast) -> World:
    agent = make_agent(tenant=cast.tenant_a)
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice, title="live")
    return World(
        cast=cast,
        session=session,
        run=make_run(session),
        alice_key=make_api_key(tenant=cast.tenant_a, user=cast.alice),
        victor_key=make_api_key(tenant=cast.tenant_a, user=cast.victor),
        carol_key=make_api_key(tenant=cast.tenant_b, user=cast.carol),
    )


def make_run(session: Session, status: str = RunStatus.EXECUTING) -> Run:
    return Run.objects.create(tenant=session.tenant, session=session, agent=session.agent, status=status)


def emit(run: Run, event_type: str = "text.delta", **data: Any) -> RunEvent:
    """Emit one event and return it as stored."""
    emit_event(session_id=run.session_id, run_id=run.pk, event_type=event_type, data=data)
    return RunEvent.objects.filter(session_id=run.session_id).latest("seq")


def emit_deltas(run: Run, texts: list[str]) -> list[int]:
    return [emit(run, text=text).seq for text in texts]


def socket(
    stack: LiveStack, session_id: Any, *, key: str | None = None, query: str = "", **options: Any
) -> Any:
    url = f"{stack.websocket_url}/ws/sessions/{session_id}/{query}"
    subprotocols = [Subprotocol("bearer"), Subprotocol(key)] if key is not None else None
    return connect(url, subprotocols=subprotocols, proxy=None, open_timeout=RECEIVE_TIMEOUT, **options)


def receive(ws: ClientConnection, timeout: float = RECEIVE_TIMEOUT) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(ws.recv(timeout=timeout))
    return frame


def receive_events(
    ws: ClientConnection, count: int, timeout: float = RECEIVE_TIMEOUT
) -> list[dict[str, Any]]:
    """The next ``count`` event frames (those with a seq), skipping heartbeats."""
    events: list[dict[str, Any]] = []
    while len(events) < count:
        frame = receive(ws, timeout)
        if "seq" in frame:
            events.append(frame)
    return events


def receive_reply(ws: ClientConnection, early_events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The next command reply (a frame without a seq). Events that arrive before it (the
    store poll can beat the reply) go to ``early_events`` when given, else are skipped."""
    while True:
        frame = receive(ws)
        if "seq" not in frame:
            return frame
        if early_events is not None:
            early_events.append(frame)


def receive_events_after(
    ws: ClientConnection, early: list[dict[str, Any]], count: int
) -> list[dict[str, Any]]:
    return early + receive_events(ws, count - len(early)) if len(early) < count else early


def assert_no_more_events(ws: ClientConnection) -> None:
    deadline = time.monotonic() + QUIET_SECONDS
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            frame = json.loads(ws.recv(timeout=remaining))
        except TimeoutError:
            return
        assert "seq" not in frame, f"unexpected extra event {frame}"


def close_code(ws: ClientConnection) -> int:
    """The code the server closed with; fails if anything was received first."""
    with pytest.raises(ConnectionClosed) as closed:
        frame = ws.recv(timeout=RECEIVE_TIMEOUT)
        pytest.fail(f"received {frame!r} before the close")
    assert closed.value.rcvd is not None
    return closed.value.rcvd.code


def browser_cookie(user: Any) -> str:
    """The Cookie header of a browser where ``user`` has logged in."""
    browser = Client()
    browser.force_login(user)
    name = django_settings.SESSION_COOKIE_NAME
    return f"{name}={browser.cookies[name].value}"


def seqs(events: list[dict[str, Any]]) -> list[int]:
    return [event["seq"] for event in events]


# --- websocket ------------------------------------------------------------------------


def test_socket_replays_stored_events_after_the_given_seq_then_live_ones(
    stack: LiveStack, world: World
) -> None:
    emit_deltas(world.run, ["a", "b", "c", "d", "e"])

    with socket(stack, world.session.pk, key=world.alice_key, query="?after=2") as ws:
        replayed = receive_events(ws, 3)
        emit_deltas(world.run, ["f", "g"])
        live = receive_events(ws, 2)
        assert_no_more_events(ws)

    assert ws.subprotocol == "bearer"
    assert replayed[0] == {
        "seq": 3,
        "session_id": str(world.session.pk),
        "run_id": str(world.run.pk),
        "type": "text.delta",
        "ts": replayed[0]["ts"],
        "data": {"text": "c"},
    }
    assert replayed[0]["ts"].endswith("Z")
    assert [(event["seq"], event["data"]["text"]) for event in replayed + live] == [
        (3, "c"), (4, "d"), (5, "e"), (6, "f"), (7, "g"),
    ]  # fmt: skip


def test_live_events_arrive_once_and_in_order(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        sent = []
        for index in range(30):
            sent.append(emit(world.run, text=f"t{index}").seq)
            if index % 10 == 9:
                time.sleep(0.15)  # several poll ticks and pub/sub batches
        received = receive_events(ws, 30)
        assert_no_more_events(ws)

    assert sent == list(range(1, 31))
    assert seqs(received) == list(range(1, 31))
    assert [event["data"]["text"] for event in received] == [f"t{index}" for index in range(30)]


def test_live_event_arrives_within_a_second(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        emit(world.run, text="warm-up")
        receive_events(ws, 1)
        started = time.monotonic()
        emit(world.run, text="timed")
        [event] = receive_events(ws, 1)
        elapsed = time.monotonic() - started

    assert event["data"] == {"text": "timed"}
    # The embedded target is 300 ms (bench/stream_fanout.py measures it); the bound
    # here only catches a stream that waits for something it should not.
    assert elapsed < 1.0


def test_reconnect_with_the_last_seq_gets_every_missed_event_once(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        emit_deltas(world.run, ["one", "two", "three"])
        first = receive_events(ws, 3)
    emit_deltas(world.run, ["four", "five"])  # while nobody listens

    with socket(stack, world.session.pk, key=world.alice_key, query=f"?after={first[-1]['seq']}") as ws:
        missed = receive_events(ws, 2)
        emit_deltas(world.run, ["six"])
        live = receive_events(ws, 1)
        assert_no_more_events(ws)

    everything = first + missed + live
    assert seqs(everything) == [1, 2, 3, 4, 5, 6]
    assert "".join(event["data"]["text"] for event in everything) == "onetwothreefourfivesix"


def test_two_runs_emitting_at_once_give_one_gap_free_sequence(stack: LiveStack, world: World) -> None:
    other_run = make_run(world.session)
    per_run = 25
    start = threading.Barrier(2)
    failures: list[BaseException] = []

    def emit_from_thread(run: Run) -> None:
        try:
            start.wait(timeout=10)
            for index in range(per_run):
                emit(run, index=index)
        except BaseException as error:  # reported below: a thread cannot fail the test itself
            failures.append(error)
        finally:
            connection.close()

    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        threads = [threading.Thread(target=emit_from_thread, args=(run,)) for run in (world.run, other_run)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        received = receive_events(ws, 2 * per_run)
        assert_no_more_events(ws)

    assert failures == []
    assert seqs(received) == list(range(1, 2 * per_run + 1))
    for run in (world.run, other_run):
        indexes = [event["data"]["index"] for event in received if event["run_id"] == str(run.pk)]
        assert indexes == list(range(per_run))
    assert list(RunEvent.objects.filter(session=world.session).values_list("seq", flat=True)) == list(
        range(1, 2 * per_run + 1)
    )


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="pub/sub needs REDIS_URL")
def test_with_redis_one_server_process_subscribes_once_per_session(stack: LiveStack, world: World) -> None:
    import redis

    client = redis.Redis.from_url(django_settings.REDIS_URL)
    channel = f"asgi__group__{session_group_name(world.session.pk)}"

    def subscribers() -> int:
        return int(dict(client.pubsub_numsub(channel))[channel.encode()])

    with (
        socket(stack, world.session.pk, key=world.alice_key) as first,
        socket(stack, world.session.pk, key=world.alice_key) as second,
    ):
        emit_deltas(world.run, ["both"])
        received = [receive_events(first, 1)[0]["seq"], receive_events(second, 1)[0]["seq"]]
        while_connected = subscribers()
    wait_until(lambda: subscribers() == 0, timeout=5, message="the group subscription to end")
    client.close()

    assert received == [1, 1]
    assert while_connected == 1


def test_deleting_the_session_closes_its_sockets_4404(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        emit_deltas(world.run, ["last words"])
        [event] = receive_events(ws, 1)
        Session.objects.filter(pk=world.session.pk).delete()

        assert (event["seq"], close_code(ws)) == (1, 4404)


def test_another_tenants_socket_is_closed_4404_and_receives_nothing(stack: LiveStack, world: World) -> None:
    emit_deltas(world.run, ["secret"])

    with socket(stack, world.session.pk, key=world.carol_key) as ws:
        assert close_code(ws) == 4404


@pytest.mark.parametrize("session_id", [uuid.UUID(int=7), "not-a-uuid"])
def test_an_unknown_session_is_closed_4404(stack: LiveStack, world: World, session_id: Any) -> None:
    with socket(stack, session_id, key=world.alice_key) as ws:
        assert close_code(ws) == 4404


@pytest.mark.parametrize("key", [None, "agt_nosuchkey_secret", "garbage"])
def test_an_unauthenticated_socket_is_closed_4401(stack: LiveStack, world: World, key: str | None) -> None:
    emit_deltas(world.run, ["secret"])

    with socket(stack, world.session.pk, key=key) as ws:
        assert close_code(ws) == 4401


def test_a_bad_after_is_closed_4400(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key, query="?after=-1") as ws:
        assert close_code(ws) == 4400


def test_api_key_in_the_query_string_authenticates(stack: LiveStack, world: World) -> None:
    emit_deltas(world.run, ["hello"])

    with socket(stack, world.session.pk, query=f"?token={world.alice_key}&after=0") as ws:
        [event] = receive_events(ws, 1)

    assert ws.subprotocol is None
    assert (event["seq"], event["data"]) == (1, {"text": "hello"})


def test_browser_session_cookie_authenticates_from_our_origin(stack: LiveStack, world: World) -> None:
    cookie = browser_cookie(world.cast.alice)
    emit_deltas(world.run, ["hi"])

    with socket(stack, world.session.pk, origin=stack.base_url, additional_headers={"Cookie": cookie}) as ws:
        [event] = receive_events(ws, 1)
    with socket(stack, world.session.pk, origin=stack.base_url) as ws:
        anonymous_code = close_code(ws)
    with pytest.raises(InvalidStatus) as refused:
        socket(stack, world.session.pk, origin="https://evil.example", additional_headers={"Cookie": cookie})

    assert event["data"] == {"text": "hi"}
    assert anonymous_code == 4401
    assert refused.value.response.status_code == 403


def test_socket_commands_post_and_cancel_through_the_services(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        ws.send(json.dumps({"type": "message", "content": "Hello there", "id": "m1"}))
        early: list[dict[str, Any]] = []
        posted = receive_reply(ws, early)
        [queued] = receive_events_after(ws, early, 1)
        ws.send(json.dumps({"type": "cancel", "run_id": posted["run_id"], "id": 2}))
        early = []
        cancelled = receive_reply(ws, early)
        finished = receive_events_after(ws, early, 2)

    run = Run.objects.get(pk=posted["run_id"])
    assert posted == {
        "type": "ack",
        "command": "message",
        "message_id": str(run.user_message_id),
        "run_id": str(run.pk),
        "id": "m1",
    }
    assert run.user_message is not None and run.user_message.text == "Hello there"
    assert (queued["type"], queued["run_id"], queued["data"]) == (
        "run.queued",
        str(run.pk),
        {"message_id": str(run.user_message_id)},
    )
    assert cancelled == {
        "type": "ack",
        "command": "cancel",
        "run_id": str(run.pk),
        "status": "cancelled",
        "id": 2,
    }
    assert [event["type"] for event in finished] == ["run.status", "run.cancelled"]
    assert seqs([queued, *finished]) == [1, 2, 3]
    assert run.status == RunStatus.CANCELLED


def test_socket_approve_decides_a_pending_tool_call(stack: LiveStack, world: World) -> None:
    run = make_run(world.session, status=RunStatus.AWAITING_APPROVAL)
    approval = ToolApproval.objects.create(
        tenant=world.session.tenant,
        run=run,
        tool_call_id="call-1",
        tool_name="shell",
        expires_at=timezone.now() + timedelta(minutes=10),
    )

    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        command = {"type": "approve", "run_id": str(run.pk), "tool_call_id": "call-1", "decision": "approve"}
        ws.send(json.dumps(command))
        early: list[dict[str, Any]] = []
        reply = receive_reply(ws, early)
        # The run resumes after the decision: its run.status can arrive before the reply too.
        resolved = receive_events_after(ws, early, 1)[0]

    approval.refresh_from_db()
    assert reply == {
        "type": "ack",
        "command": "approve",
        "run_id": str(run.pk),
        "tool_call_id": "call-1",
        "status": "approved",
    }
    assert (approval.status, approval.decided_by_id) == ("approved", world.cast.alice.pk)
    assert (resolved["type"], resolved["data"]["tool_call_id"], resolved["data"]["decision"]) == (
        "approval.resolved",
        "call-1",
        "approve",
    )


def test_socket_answer_answers_a_pending_question(stack: LiveStack, world: World) -> None:
    run = make_run(world.session, status=RunStatus.AWAITING_INPUT)
    question = UserQuestion.objects.create(
        tenant=world.session.tenant,
        run=run,
        tool_call_id="call-ask",
        question="Which city?",
        expires_at=timezone.now() + timedelta(minutes=10),
    )

    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        blank = {"type": "answer", "run_id": str(run.pk), "tool_call_id": "call-ask", "answer": " "}
        ws.send(json.dumps(blank))
        refused = receive_reply(ws, [])
        ws.send(json.dumps({**blank, "answer": "Lisbon, please"}))
        early: list[dict[str, Any]] = []
        reply = receive_reply(ws, early)
        resolved = receive_events_after(ws, early, 1)[0]

    question.refresh_from_db()
    assert refused == {
        "type": "error",
        "code": "invalid",
        "message": "answer: The answer is empty.",
        "fields": {"answer": ["The answer is empty."]},
    }
    assert reply == {
        "type": "ack",
        "command": "answer",
        "run_id": str(run.pk),
        "tool_call_id": "call-ask",
        "status": "answered",
    }
    assert (question.status, question.answer, question.answered_by_id) == (
        "answered",
        "Lisbon, please",
        world.cast.alice.pk,
    )
    assert (resolved["type"], resolved["data"]["answer"], resolved["data"]["answered_by"]) == (
        "input.resolved",
        "Lisbon, please",
        "alice@a.test",
    )


def test_socket_commands_answer_errors_without_closing(stack: LiveStack, world: World) -> None:
    other_session = Session.objects.create(tenant=world.session.tenant, agent=world.session.agent)
    other_sessions_run = make_run(other_session)

    def error(code: str, message: str, fields: dict[str, list[str]] | None = None) -> dict[str, Any]:
        return {"type": "error", "code": code, "message": message, "fields": fields or {}}

    with socket(stack, world.session.pk, key=world.victor_key) as viewer:
        viewer.send(json.dumps({"type": "message", "content": "viewers cannot post"}))
        viewer_post = receive_reply(viewer)
        viewer.send(json.dumps({"type": "cancel", "run_id": str(world.run.pk)}))
        viewer_cancel = receive_reply(viewer)
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        ws.send("{not json")
        bad_json = receive_reply(ws)
        ws.send(json.dumps({"type": "dance"}))
        unknown = receive_reply(ws)
        ws.send(json.dumps({"type": "message", "content": 42}))
        bad_content = receive_reply(ws)
        ws.send(json.dumps({"type": "cancel", "run_id": str(other_sessions_run.pk)}))
        foreign_run = receive_reply(ws)
        ws.send(
            json.dumps(
                {
                    "type": "approve",
                    "run_id": str(world.run.pk),
                    "tool_call_id": "nope",
                    "decision": "approve",
                }
            )
        )
        nothing_pending = receive_reply(ws)
        emit_deltas(world.run, ["still streaming"])
        [event] = receive_events(ws, 1)

    denied = "Your role does not allow this action."
    assert viewer_post == error("permission_denied", denied)
    assert viewer_cancel == error("permission_denied", denied)
    assert bad_json == error("invalid_json", "The frame is not valid JSON.")
    assert unknown == error("unknown_command", "Commands are message, cancel, approve and answer.")
    assert bad_content == error("invalid", "content: Must be a string.", {"content": ["Must be a string."]})
    assert foreign_run == error("not_found", "Not found.")
    assert nothing_pending == error(
        "invalid",
        "tool_call_id: No approval is pending for this tool call.",
        {"tool_call_id": ["No approval is pending for this tool call."]},
    )
    assert event["data"] == {"text": "still streaming"}
    assert Message.objects.count() == 0
    assert list(Run.objects.order_by("created_at").values_list("status", flat=True)) == [
        RunStatus.EXECUTING,
        RunStatus.EXECUTING,
    ]


def test_socket_commands_see_a_role_change_at_once(stack: LiveStack, world: World) -> None:
    with socket(stack, world.session.pk, key=world.alice_key) as ws:
        Membership.objects.filter(user=world.cast.alice).update(role=Role.VIEWER)
        ws.send(json.dumps({"type": "message", "content": "still an owner?"}))
        reply = receive_reply(ws)

    assert reply == {
        "type": "error",
        "code": "permission_denied",
        "message": "Your role does not allow this action.",
        "fields": {},
    }
    assert Message.objects.count() == 0


def test_idle_socket_gets_heartbeats(world: World, settings: Any) -> None:
    settings.STREAM_HEARTBEAT_SECONDS = 0.2

    scope = {
        "type": "websocket",
        "path": f"/ws/sessions/{world.session.pk}/",
        "query_string": f"token={world.alice_key}".encode(),
        "headers": [],
        "subprotocols": [],
    }

    async def scenario() -> list[dict[str, Any]]:
        socket = ApplicationCommunicator(websocket_application(), scope)
        await socket.send_input({"type": "websocket.connect"})
        messages = [await socket.receive_output(timeout=2) for _ in range(3)]
        await socket.send_input({"type": "websocket.disconnect", "code": 1000})
        await socket.wait(timeout=2)
        return messages

    assert async_to_sync(scenario)() == [
        {"type": "websocket.accept", "subprotocol": None},
        {"type": "websocket.send", "text": '{"type": "heartbeat"}'},
        {"type": "websocket.send", "text": '{"type": "heartbeat"}'},
    ]


@pytest.fixture
def agent_stack(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    """A server and a separate django-q2 worker whose agents talk to the fake model."""
    live = LiveStack(tmp_path, ANTHROPIC_API_KEY="test-anthropic-key", ANTHROPIC_BASE_URL=fake_model.url)
    live.start_server()
    live.start_worker(workers=1)
    yield live
    live.stop()


def is_subsequence(wanted: list[str], actual: list[str]) -> bool:
    remaining = iter(actual)
    return all(item in remaining for item in wanted)


def test_a_workers_run_streams_to_a_socket_that_reconnects_mid_run(
    cast: Cast, fake_model: FakeModelServer, agent_stack: LiveStack
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    session = Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.alice)
    answer = "Two plus three is five. " * 12
    fake_model.script(
        Turn(tool_calls=[("calculator", {"expression": "2+3"})]),
        Turn(text=answer, chunk_size=6, chunk_delay=0.02),
        match="stream-test",
    )
    key = make_api_key(tenant=cast.tenant_a, user=cast.alice)

    with socket(agent_stack, session.pk, key=key) as ws:
        ws.send(json.dumps({"type": "message", "content": "stream-test: 2+3?"}))
        before: list[dict[str, Any]] = []
        run_id = receive_reply(ws, before)["run_id"]
        while sum(event["type"] == "text.delta" for event in before) < 3:
            before += receive_events(ws, 1, timeout=WORKER_TIMEOUT)
    with socket(agent_stack, session.pk, key=key, query=f"?after={before[-1]['seq']}") as ws:
        after: list[dict[str, Any]] = []
        while not after or after[-1]["type"] != "run.completed":
            after += receive_events(ws, 1, timeout=WORKER_TIMEOUT)
        assert_no_more_events(ws)

    events = before + after
    types = [event["type"] for event in events]
    final_message = (
        Message.objects.filter(run_id=run_id, role=MessageRole.ASSISTANT).order_by("position").last()
    )
    assert seqs(events) == list(range(1, len(events) + 1))
    assert RunEvent.objects.filter(session=session).count() == len(events)
    assert {event["run_id"] for event in events} == {run_id}
    assert is_subsequence(
        [
            "run.queued", "run.started", "message.started", "tool.call", "tool.result", "message.started",
            "text.delta", "message.completed", "usage", "run.completed",
        ],
        types,
    ), types  # fmt: skip
    assert "".join(event["data"]["text"] for event in events if event["type"] == "text.delta") == answer
    assert final_message is not None and final_message.text == answer


# --- SSE ------------------------------------------------------------------------------


class EventStream:
    """Reads SSE events (id, event, data) from one open response, across several calls."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.iter_lines()

    def read(self, count: int) -> list[dict[str, Any]]:
        """The next ``count`` events, or fewer if the server ends the stream first."""
        events: list[dict[str, Any]] = []
        fields: dict[str, str] = {}
        for line in self._lines:
            if line == "":
                if "data" in fields:
                    events.append(
                        {"id": fields["id"], "event": fields["event"], "data": json.loads(fields["data"])}
                    )
                    if len(events) == count:
                        return events
                fields = {}
            elif not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
        return events


@contextmanager
def sse_get(stack: LiveStack, path: str, key: str, **headers: str) -> Iterator[EventStream]:
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {key}", **headers}
    with httpx.stream("GET", f"{stack.base_url}{path}", headers=headers, timeout=RECEIVE_TIMEOUT) as response:
        yield EventStream(response)


def test_sse_resumes_with_last_event_id_without_gaps_or_duplicates(stack: LiveStack, world: World) -> None:
    path = f"/api/v1/sessions/{world.session.pk}/events/"
    emit_deltas(world.run, ["a", "b", "c"])

    with sse_get(stack, path, world.alice_key) as stream:
        first = stream.read(3)
    emit_deltas(world.run, ["d", "e"])
    with sse_get(stack, f"{path}?after=1", world.alice_key, **{"Last-Event-ID": first[-1]["id"]}) as stream:
        missed = stream.read(2)
        emit_deltas(world.run, ["f"])
        live = stream.read(1)

    assert stream.response.status_code == 200
    assert stream.response.headers["content-type"].startswith("text/event-stream")
    everything = first + missed + live
    assert [event["id"] for event in everything] == ["1", "2", "3", "4", "5", "6"]
    assert {event["event"] for event in everything} == {"text.delta"}
    assert [event["data"]["seq"] for event in everything] == [1, 2, 3, 4, 5, 6]
    assert "".join(event["data"]["data"]["text"] for event in everything) == "abcdef"


def test_sse_after_query_parameter_resumes(stack: LiveStack, world: World) -> None:
    emit_deltas(world.run, ["a", "b", "c"])

    with sse_get(stack, f"/api/v1/sessions/{world.session.pk}/events/?after=2", world.alice_key) as stream:
        [event] = stream.read(1)

    assert (event["id"], event["data"]["data"]) == ("3", {"text": "c"})


def test_sse_accepts_the_browser_session(stack: LiveStack, world: World) -> None:
    cookie = browser_cookie(world.cast.alice)
    emit_deltas(world.run, ["for the browser"])
    url = f"{stack.base_url}/api/v1/sessions/{world.session.pk}/events/"

    headers = {"Accept": "text/event-stream", "Cookie": cookie}
    with httpx.stream("GET", url, headers=headers, timeout=RECEIVE_TIMEOUT) as response:
        [event] = EventStream(response).read(1)

    assert (event["id"], event["data"]["data"]) == ("1", {"text": "for the browser"})


def test_run_sse_stream_ends_after_the_runs_terminal_event(stack: LiveStack, world: World) -> None:
    other_run = make_run(world.session)
    emit(world.run, "run.started")
    emit(other_run, "run.started")
    emit(world.run, text="x")

    with sse_get(stack, f"/api/v1/runs/{world.run.pk}/events/", world.alice_key) as stream:
        replayed = stream.read(2)
        emit(other_run, text="not mine")
        emit(world.run, text="y")
        emit(world.run, "run.completed", status="completed", stop_reason="end_turn")
        emit(other_run, text="after the end")
        rest = stream.read(10)  # returns when the server ends the stream

    assert [(event["id"], event["event"]) for event in replayed + rest] == [
        ("1", "run.started"), ("3", "text.delta"), ("5", "text.delta"), ("6", "run.completed"),
    ]  # fmt: skip


def test_run_sse_stream_of_a_finished_run_replays_and_ends(stack: LiveStack, world: World) -> None:
    emit(world.run, "run.started")
    emit(world.run, "run.failed", status="failed", stop_reason="error")
    Run.objects.filter(pk=world.run.pk).update(status=RunStatus.FAILED, finished_at=timezone.now())

    with sse_get(stack, f"/api/v1/runs/{world.run.pk}/events/", world.alice_key) as stream:
        everything = stream.read(10)
    with sse_get(stack, f"/api/v1/runs/{world.run.pk}/events/?after=2", world.alice_key) as stream:
        nothing_new = stream.read(10)

    assert [event["event"] for event in everything] == ["run.started", "run.failed"]
    assert nothing_new == []


@pytest.mark.parametrize("kind", ["sessions", "runs"])
def test_sse_errors_answer_the_json_error_body(stack: LiveStack, world: World, kind: str) -> None:
    object_id = world.session.pk if kind == "sessions" else world.run.pk
    url = f"{stack.base_url}/api/v1/{kind}/{object_id}/events/"
    accept = {"Accept": "text/event-stream"}

    anonymous = httpx.get(url, headers=accept)
    bad_key = httpx.get(url, headers={**accept, "Authorization": "Bearer agt_nosuchkey_secret"})
    other_tenant = httpx.get(url, headers={**accept, "Authorization": f"Bearer {world.carol_key}"})
    unknown = httpx.get(
        f"{stack.base_url}/api/v1/{kind}/{uuid.UUID(int=9)}/events/",
        headers={**accept, "Authorization": f"Bearer {world.alice_key}"},
    )
    bad_after = httpx.get(f"{url}?after=x", headers={**accept, "Authorization": f"Bearer {world.alice_key}"})

    assert (anonymous.status_code, anonymous.json()) == (
        401,
        {
            "error": {
                "code": "not_authenticated",
                "message": "Authentication credentials were not provided or are invalid.",
                "fields": {},
            }
        },
    )
    assert (bad_key.status_code, bad_key.json()) == (
        401,
        {
            "error": {
                "code": "authentication_failed",
                "message": "Invalid, expired or revoked API key.",
                "fields": {},
            }
        },
    )
    not_found = {"error": {"code": "not_found", "message": "Not found.", "fields": {}}}
    assert (other_tenant.status_code, other_tenant.json()) == (404, not_found)
    assert (unknown.status_code, unknown.json()) == (404, not_found)
    assert (bad_after.status_code, bad_after.json()) == (
        400,
        {
            "error": {
                "code": "invalid",
                "message": "after: Must be a non-negative integer.",
                "fields": {"after": ["Must be a non-negative integer."]},
            }
        },
    )


def test_events_url_without_event_stream_accept_answers_the_json_list(stack: LiveStack, world: World) -> None:
    emit_deltas(world.run, ["a", "b"])

    response = httpx.get(
        f"{stack.base_url}/api/v1/sessions/{world.session.pk}/events/?after=1",
        headers={"Authorization": f"Bearer {world.alice_key}"},
    )

    assert response.status_code == 200
    assert [event["seq"] for event in response.json()["results"]] == [2]


def test_sse_sends_keep_alive_comments_when_idle(world: World, settings: Any) -> None:
    settings.SSE_KEEPALIVE_SECONDS = 0.2
    request = AsyncRequestFactory().get(
        f"/api/v1/sessions/{world.session.pk}/events/",
        headers={"Accept": "text/event-stream", "Authorization": f"Bearer {world.alice_key}"},
    )

    async def first_chunks() -> list[str]:
        response = await session_event_stream(request, str(world.session.pk))
        assert isinstance(response, StreamingHttpResponse)
        chunks = aiter(response)
        received = [bytes(await anext(chunks)).decode() for _ in range(3)]
        await chunks.aclose()  # type: ignore[attr-defined]
        return received

    assert async_to_sync(first_chunks)() == ["retry: 2000\n\n", ": keep-alive\n\n", ": keep-alive\n\n"]


# --- retention ------------------------------------------------------------------------


def test_prune_deletes_events_of_runs_finished_before_the_window_and_keeps_messages(world: World) -> None:
    old = make_run(world.session, status=RunStatus.COMPLETED)
    recent = make_run(world.session, status=RunStatus.CANCELLED)
    active = world.run
    message = Message.objects.create(
        tenant=world.session.tenant, session=world.session, position=1, role=MessageRole.USER, run=old
    )
    for run in (old, recent, active):
        emit(run, text="kept?")
        emit(run, text="kept?")
    Run.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=31))
    Run.objects.filter(pk=recent.pk).update(finished_at=timezone.now() - timedelta(days=29))

    deleted = prune_run_events()

    assert deleted == 2
    assert RunEvent.objects.filter(run=old).count() == 0
    assert RunEvent.objects.filter(run=recent).count() == 2
    assert RunEvent.objects.filter(run=active).count() == 2
    assert Message.objects.filter(pk=message.pk).exists()


def test_prune_honours_a_shorter_window(world: World) -> None:
    finished = make_run(world.session, status=RunStatus.COMPLETED)
    emit(finished, text="old enough")
    Run.objects.filter(pk=finished.pk).update(finished_at=timezone.now() - timedelta(days=2))

    assert prune_run_events(older_than_days=3) == 0
    assert prune_run_events(older_than_days=1) == 1


def test_retention_schedule_is_registered_once(db: None) -> None:
    first = ensure_retention_schedule()
    second = ensure_retention_schedule()

    assert first.pk == second.pk
    assert Schedule.objects.filter(name=RETENTION_SCHEDULE_NAME).count() == 1
    assert (second.func, second.schedule_type, second.repeats) == (
        "sessions.retention.prune_run_events",
        Schedule.HOURLY,
        -1,
    )
