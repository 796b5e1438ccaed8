"""Open streams follow the right to read them, and the socket's message command posts as REST does.

A live uvicorn that authorizes its streams again every half second, with heartbeats far apart:
a stream that closes did so because of the check, not because of a heartbeat.
"""

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection

from sessions.models import Message, MessageRole, Run, Session
from sessions.tasks import execute_run
from tenants.models import ApiKey, Membership
from tenants.services import api_key_create, api_key_revoke, membership_delete
from tests.conftest import Cast, api_client_for
from tests.factories import make_agent
from tests.live import LiveStack
from tests.test_runs_api import post_message
from tests.test_streaming import (
    EventStream,
    browser_cookie,
    emit,
    make_run,
    receive_events,
    receive_reply,
    socket,
)

pytestmark = pytest.mark.django_db(transaction=True)

REAUTHORIZE_SECONDS = 0.5
# A check every half second closes a stream well within this, even on a busy machine.
CLOSE_WITHIN_SECONDS = 5.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[LiveStack]:
    live = LiveStack(
        Path(tmp_path_factory.mktemp("stream-access")),
        STREAM_REAUTHORIZE_SECONDS=str(REAUTHORIZE_SECONDS),
        STREAM_HEARTBEAT_SECONDS="60",
        SSE_KEEPALIVE_SECONDS="60",
    )
    live.start_server()
    yield live
    live.stop()


@dataclass
class Keys:
    alice: str
    bob: str
    bob_key: ApiKey


@pytest.fixture
def session(cast: Cast) -> Session:
    agent = make_agent(tenant=cast.tenant_a)
    return Session.objects.create(tenant=cast.tenant_a, agent=agent, created_by=cast.bob, title="live")


@pytest.fixture
def keys(cast: Cast) -> Keys:
    bob = api_key_create(tenant=cast.tenant_a, created_by=cast.bob, name="bob's")
    alice = api_key_create(tenant=cast.tenant_a, created_by=cast.alice, name="alice's")
    return Keys(alice=alice.plaintext, bob=bob.plaintext, bob_key=bob.api_key)


def close_code_after(ws: ClientConnection, started: float) -> tuple[int, float]:
    """Waits for the server's close, skipping heartbeats and events; its code and the seconds
    it took since ``started``."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(timeout=CLOSE_WITHIN_SECONDS)
    assert closed.value.rcvd is not None, "the client timed out: the server never closed"
    return closed.value.rcvd.code, time.monotonic() - started


def remove_member(cast: Cast, user: Any) -> None:
    membership_delete(membership=Membership.objects.get(tenant=cast.tenant_a, user=user))


def test_revoking_a_key_closes_its_socket_4401_and_leaves_other_sockets_open(
    stack: LiveStack, session: Session, keys: Keys
) -> None:
    run = make_run(session)
    with socket(stack, session.pk, key=keys.bob) as bobs, socket(stack, session.pk, key=keys.alice) as alices:
        emit(run, text="before")
        assert [event["data"] for event in receive_events(bobs, 1)] == [{"text": "before"}]
        assert [event["data"] for event in receive_events(alices, 1)] == [{"text": "before"}]
        revoked_at = time.monotonic()
        api_key_revoke(api_key=keys.bob_key)
        code, seconds = close_code_after(bobs, revoked_at)
        emit(run, text="after")
        still_delivered = receive_events(alices, 1)

    assert code == 4401
    assert seconds < CLOSE_WITHIN_SECONDS
    assert [event["data"] for event in still_delivered] == [{"text": "after"}]


def test_removing_the_member_closes_the_keys_socket_4403(
    stack: LiveStack, cast: Cast, session: Session, keys: Keys
) -> None:
    with socket(stack, session.pk, key=keys.bob) as ws:
        removed_at = time.monotonic()
        remove_member(cast, cast.bob)
        code, seconds = close_code_after(ws, removed_at)

    assert code == 4403
    assert seconds < CLOSE_WITHIN_SECONDS


def test_removing_the_member_closes_the_browser_sessions_socket_4403(
    stack: LiveStack, cast: Cast, session: Session
) -> None:
    cookie = browser_cookie(cast.bob)
    with socket(stack, session.pk, origin=stack.base_url, additional_headers={"Cookie": cookie}) as ws:
        ws.ping().wait(CLOSE_WITHIN_SECONDS)  # the socket is open and authorized
        removed_at = time.monotonic()
        remove_member(cast, cast.bob)
        code, seconds = close_code_after(ws, removed_at)

    assert code == 4403
    assert seconds < CLOSE_WITHIN_SECONDS


def read_until_end(stream: EventStream) -> list[dict[str, Any]]:
    """Every event until the server ends the stream; fails with a read timeout if it does not."""
    return stream.read(1000)


@pytest.mark.parametrize("kind", ["sessions", "runs"])
def test_revoking_a_key_ends_its_sse_stream(
    stack: LiveStack, session: Session, keys: Keys, kind: str
) -> None:
    run = make_run(session)
    object_id = session.pk if kind == "sessions" else run.pk
    headers = {"Accept": "text/event-stream", "Authorization": f"Bearer {keys.bob}"}
    url = f"{stack.base_url}/api/v1/{kind}/{object_id}/events/"
    with httpx.stream("GET", url, headers=headers, timeout=CLOSE_WITHIN_SECONDS) as response:
        stream = EventStream(response)
        emit(run, text="before")
        assert [event["data"]["data"] for event in stream.read(1)] == [{"text": "before"}]
        revoked_at = time.monotonic()
        api_key_revoke(api_key=keys.bob_key)
        rest = read_until_end(stream)
        seconds = time.monotonic() - revoked_at

    assert response.status_code == 200
    assert rest == []
    assert seconds < CLOSE_WITHIN_SECONDS
    assert run.status == "executing"  # the run's own end did not end the stream


def test_removing_the_member_ends_the_browser_sessions_sse_stream(
    stack: LiveStack, cast: Cast, session: Session
) -> None:
    headers = {"Accept": "text/event-stream", "Cookie": browser_cookie(cast.bob)}
    url = f"{stack.base_url}/api/v1/sessions/{session.pk}/events/"
    run = make_run(session)
    with httpx.stream("GET", url, headers=headers, timeout=CLOSE_WITHIN_SECONDS) as response:
        stream = EventStream(response)
        emit(run, text="before")
        assert len(stream.read(1)) == 1
        removed_at = time.monotonic()
        remove_member(cast, cast.bob)
        rest = read_until_end(stream)
        seconds = time.monotonic() - removed_at
    reconnect = httpx.get(url, headers=headers, timeout=CLOSE_WITHIN_SECONDS)

    assert rest == []
    assert seconds < CLOSE_WITHIN_SECONDS
    assert reconnect.status_code == 403


# --- the socket's message command ------------------------------------------------------


def answered_turns(cast: Cast, session: Session, contents: list[str]) -> list[Message]:
    """Post each message through REST and run it to its (offline model's) answer; the answers."""
    client = api_client_for(cast.tenant_a, cast.bob)
    answers = []
    for content in contents:
        posted = post_message(client, str(session.pk), content)
        run_id = posted["run"]["id"]  # type: ignore[index]
        execute_run(run_id)
        answers.append(Message.objects.get(run_id=run_id, role=MessageRole.ASSISTANT))
    return answers


def test_socket_message_with_parent_id_posts_a_branch_from_that_message(
    stack: LiveStack, cast: Cast, session: Session, keys: Keys
) -> None:
    first_answer, _second_answer = answered_turns(cast, session, ["one", "two"])

    with socket(stack, session.pk, key=keys.bob) as ws:
        command = {"type": "message", "content": "two, again", "parent_id": str(first_answer.pk), "id": 1}
        ws.send(json.dumps(command))
        reply = receive_reply(ws)

    assert (reply["type"], reply["command"], reply["id"]) == ("ack", "message", 1)
    message = Message.objects.get(pk=reply["message_id"])
    assert (message.text, message.parent_id) == ("two, again", first_answer.pk)
    assert Run.objects.get(pk=reply["run_id"]).user_message_id == message.pk


def test_socket_message_with_an_unknown_parent_id_answers_a_field_error_and_posts_nothing(
    stack: LiveStack, session: Session, keys: Keys
) -> None:
    with socket(stack, session.pk, key=keys.bob) as ws:
        command = {"type": "message", "content": "x", "parent_id": str(session.pk), "id": 2}
        ws.send(json.dumps(command))
        reply = receive_reply(ws)

    assert reply == {
        "type": "error",
        "code": "invalid",
        "message": "parent_id: No such message in this conversation.",
        "fields": {"parent_id": ["No such message in this conversation."]},
        "id": 2,
    }
    assert (Message.objects.count(), Run.objects.count()) == (0, 0)
