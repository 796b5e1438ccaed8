"""Where the sandbox cannot run, code_run is hidden from agents and the admin page says why."""

from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from tenants.actors import Actor
from tests.conftest import Cast
from tests.factories import make_agent
from tools.agent_tools import agent_tools_overview
from tools.models import Tool, ToolPolicy
from tools.registry import ensure_builtin_tools

pytestmark = pytest.mark.django_db


@pytest.fixture
def sandbox_python_missing(settings: Any, tmp_path: Path) -> Path:
    settings.SANDBOX_PYTHON_DIR = tmp_path / "missing"
    return tmp_path / "missing"


def test_code_run_is_left_out_of_an_agents_tools(cast: Cast, sandbox_python_missing: Path) -> None:
    agent = make_agent(tenant=cast.tenant_a)
    ToolPolicy.objects.create(agent=agent, profile="full")

    overview = agent_tools_overview(
        agent=agent, actor=Actor(user=cast.alice, tenant=cast.tenant_a, role="owner")
    )

    names = {tool["name"] for tool in overview["tools"]}
    assert "calculator" in names
    assert "code_run" not in names


def test_the_admin_page_of_code_run_says_why_it_is_hidden(cast: Cast, sandbox_python_missing: Path) -> None:
    ensure_builtin_tools()
    code_run = Tool.objects.get(tenant__isnull=True, name="code_run")
    client = Client()
    assert client.login(username="alice@a.test", password="alice-password")

    page = client.get(f"/admin/tools/tool/{code_run.pk}/change/")

    assert page.status_code == 200
    reason = (
        f"hidden from agents: the sandbox Python is not built at {sandbox_python_missing}: "
        "run `make sandbox-python` (needs /usr/bin/python3 and access to PyPI)"
    )
    assert reason.encode() in page.content
