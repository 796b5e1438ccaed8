"""The catastrophic-pattern attack against live processes: other tenants keep their normal speed.

Tenant A's HTTP tool has ``"(a+)+$"`` in its input schema and is given ``"aaa…a!"``. On a
backtracking engine the check holds the process (and its GIL) for hours, so tenant B's requests
and runs would wait with it; the timeouts below bound how long such a failure takes to show.
"""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rest_framework.test import APIClient

from sessions.models import Run, Step, ToolApproval
from tests.conftest import Cast
from tests.factories import make_agent, make_api_key
from tests.fake_model_server import FakeModelServer, Turn
from tests.live import LiveStack, wait_until
from tests.tools.test_tool_schemas import ATTACK, CATASTROPHIC, HTTP_TOOL, object_schema, waiting_run
from tools.models import AgentTool, Tool, ToolKind

pytestmark = pytest.mark.django_db(transaction=True)

ATTACK_SCHEMA = object_schema(properties={"city": {"type": "string", "pattern": CATASTROPHIC}})
ATTACK_ERROR = f"city: {ATTACK!r} does not match {CATASTROPHIC!r}"
# Normal answers take milliseconds; these bounds only absorb a busy test machine.
REQUEST_TIMEOUT = 5.0
SLOW_REQUEST = 2.0


@pytest.fixture
def stack(tmp_path: Path, fake_model: FakeModelServer) -> Iterator[LiveStack]:
    live = LiveStack(
        tmp_path,
        ANTHROPIC_API_KEY="test-anthropic-key",
        ANTHROPIC_BASE_URL=fake_model.url,
    )
    yield live
    live.stop()


def test_another_tenants_requests_keep_their_speed_while_edited_arguments_attack_the_server(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer, stack: LiveStack
) -> None:
    run_id = waiting_run(cast, bob_api, fake_model, ATTACK_SCHEMA)
    call_id = ToolApproval.objects.get(run_id=run_id).tool_call_id
    bob = {"Authorization": f"Bearer {make_api_key(tenant=cast.tenant_a, user=cast.bob)}"}
    carol = {"Authorization": f"Bearer {make_api_key(tenant=cast.tenant_b, user=cast.carol)}"}
    stack.start_server()
    attack_answers: list[httpx.Response] = []
    attack_started = threading.Event()
    stop = threading.Event()

    def attack() -> None:
        body = {"tool_call_id": call_id, "decision": "approve", "arguments": {"city": ATTACK}}
        with httpx.Client(base_url=stack.base_url, headers=bob, timeout=REQUEST_TIMEOUT) as client:
            while not stop.is_set():
                attack_started.set()
                attack_answers.append(client.post(f"/api/v1/runs/{run_id}/approve/", json=body))

    attacker = threading.Thread(target=attack, daemon=True)
    attacker.start()
    try:
        assert attack_started.wait(REQUEST_TIMEOUT)
        durations = []
        with httpx.Client(base_url=stack.base_url, headers=carol, timeout=REQUEST_TIMEOUT) as client:
            for _ in range(10):
                started = time.monotonic()
                assert client.get("/api/v1/agents/").status_code == 200
                durations.append(time.monotonic() - started)
    finally:
        stop.set()
        attacker.join(REQUEST_TIMEOUT * 2)

    assert max(durations) < SLOW_REQUEST, durations
    assert len(attack_answers) >= 1
    assert {answer.status_code for answer in attack_answers} == {400}
    assert attack_answers[0].json()["error"]["fields"] == {"arguments": [ATTACK_ERROR]}
    assert ToolApproval.objects.get(run_id=run_id).status == "pending"


def test_another_tenants_run_keeps_its_speed_while_a_tool_call_attacks_the_worker(
    cast: Cast, bob_api: APIClient, carol_api: APIClient, fake_model: FakeModelServer, stack: LiveStack
) -> None:
    tool = Tool.objects.create(
        tenant=cast.tenant_a, kind=ToolKind.HTTP, http_method="GET", input_schema=ATTACK_SCHEMA, **HTTP_TOOL
    )
    attacker_agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic")
    AgentTool.objects.create(agent=attacker_agent, tool=tool)
    quiet_agent = make_agent(tenant=cast.tenant_b, model_provider="anthropic")
    fake_model.script(Turn(tool_calls=[("weather", {"city": ATTACK})]), Turn(text="done"), match="attack")
    fake_model.script(Turn(text="All quiet."), match="quiet")
    stack.start_worker(workers=2)

    attack_run = post(bob_api, attacker_agent.pk, "attack: the weather")
    # Once the model has been asked, its answer (the attacking call) is checked moments later.
    wait_until(lambda: fake_model.requests, timeout=30, message=f"the attack's model call\n{stack.logs()}")
    started = time.monotonic()
    quiet_run = post(carol_api, quiet_agent.pk, "quiet: how are things?")
    wait_until(
        lambda: Run.objects.filter(pk=quiet_run, status="completed").exists(),
        timeout=15,
        message=f"the other tenant's run to complete\n{stack.logs()}",
    )
    quiet_seconds = time.monotonic() - started
    wait_until(lambda: Run.objects.filter(pk=attack_run, status="completed").exists(), timeout=15)

    assert quiet_seconds < 15
    output = Step.objects.get(run_id=attack_run, kind="tool_call").output
    assert output == {"content": f"invalid arguments: {ATTACK_ERROR}", "is_error": True}


def post(api: APIClient, agent_id: object, content: str) -> str:
    session = api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json").json()
    posted = api.post(f"/api/v1/sessions/{session['id']}/messages/", {"content": content}, format="json")
    assert posted.status_code == 202, posted.json()
    run_id: str = posted.json()["run"]["id"]
    return run_id
