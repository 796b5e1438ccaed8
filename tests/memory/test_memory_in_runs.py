"""Retrieved memories reach the model's context in a run, and only the right ones."""

import pytest
from rest_framework.test import APIClient

from memory.models import Memory, MemoryStatus
from sessions.tasks import execute_run
from tests.conftest import Cast
from tests.factories import make_agent
from tests.fake_model_server import FakeModelServer, Turn
from tests.memory.factories import make_memory

pytestmark = pytest.mark.django_db


def ask(api: APIClient, agent_id: object, content: str) -> None:
    session = api.post("/api/v1/sessions/", {"agent": str(agent_id)}, format="json").json()
    run_id = api.post(
        f"/api/v1/sessions/{session['id']}/messages/", {"content": content}, format="json"
    ).json()["run"]["id"]
    execute_run(run_id)


def test_relevant_active_memories_of_the_agent_go_into_the_system_prompt(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", system_prompt="Be brief.")
    other_agent = make_agent(tenant=cast.tenant_a)
    other_tenants_agent = make_agent(tenant=cast.tenant_b)
    remembered = make_memory(agent=agent, content="The deployment region is eu-west-3 in Paris")
    make_memory(agent=agent, content="The deployment region was us-east-1", status=MemoryStatus.SUGGESTED)
    make_memory(agent=other_agent, content="The deployment region of another agent is ap-south-1")
    make_memory(agent=other_tenants_agent, content="Tenant B deployment region is sa-east-1")
    fake_model.set_default(Turn(text="eu-west-3"))

    ask(bob_api, agent.pk, "Which deployment region do we use?")

    system = fake_model.requests[0].body["system"]
    system_text = system if isinstance(system, str) else " ".join(block["text"] for block in system)
    assert system_text.startswith("Be brief.")
    assert "eu-west-3 in Paris" in system_text
    assert "us-east-1" not in system_text
    assert "ap-south-1" not in system_text
    assert "sa-east-1" not in system_text
    assert Memory.objects.get(pk=remembered.pk).access_count == 1


def test_no_relevant_memory_leaves_the_prompt_alone(
    cast: Cast, bob_api: APIClient, fake_model: FakeModelServer
) -> None:
    agent = make_agent(tenant=cast.tenant_a, model_provider="anthropic", system_prompt="Be brief.")
    make_memory(agent=agent, content="The office plants are watered on Fridays")
    fake_model.set_default(Turn(text="ok"))

    ask(bob_api, agent.pk, "Translate hello into German")

    system = fake_model.requests[0].body["system"]
    system_text = system if isinstance(system, str) else " ".join(block["text"] for block in system)
    assert system_text == "Be brief."
