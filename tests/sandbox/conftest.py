"""The sandbox tests need bubblewrap and the sandbox Python (`make sandbox-python`); they skip without."""

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tenants.models import Tenant
from tests.factories import make_agent, make_run, make_tenant
from tools.builtins.base import ToolContext
from tools.builtins.code import code_run_unavailable_reason, run_code_run


@pytest.fixture(autouse=True)
def stored_rows(db: None) -> None:
    """Every test here stores its run, session and artifacts."""


@pytest.fixture(autouse=True)
def sandbox_available() -> None:
    reason = code_run_unavailable_reason()
    if reason:
        pytest.skip(f"code_run cannot run here: {reason}")


@pytest.fixture(autouse=True)
def sandbox_root(settings: Any) -> Iterator[Path]:
    """Inside the configured root, not the test's tmp_path: its 0700 parents would shut the sandbox
    uid out (CI points ``SANDBOX_ROOT`` at a folder others may pass)."""
    configured = Path(settings.SANDBOX_ROOT)
    configured.mkdir(mode=0o711, parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=configured, prefix="test-sandbox-"))
    root.chmod(0o711)
    settings.SANDBOX_ROOT = root
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def small_limits(settings: Any) -> None:
    """Limits small enough that each bomb test ends in seconds."""
    settings.SANDBOX_CPU_SECONDS = 2
    settings.SANDBOX_WALL_SECONDS = 10.0
    settings.SANDBOX_MEMORY_BYTES = 512 << 20
    settings.SANDBOX_PROCESSES = 32
    settings.SANDBOX_OUTPUT_BYTES = 64 << 10
    settings.SANDBOX_FILE_BYTES = 10 << 20


def make_context(
    *, tenant_id: uuid.UUID | None = None, should_stop: Callable[[], bool] = lambda: False
) -> ToolContext:
    """A run of its own session, stored: code_run reads the session's attachments and stores
    what the code leaves in output/ as the run's artifacts."""
    tenant = Tenant.objects.get(pk=tenant_id) if tenant_id else make_tenant()
    agent = make_agent(tenant=tenant)
    run = make_run(agent=agent, user=None)
    return ToolContext(
        tenant_id=tenant.pk,
        agent_id=agent.pk,
        session_id=run.session_id,
        run_id=run.pk,
        user_id=None,
        user_role="member",
        should_stop=should_stop,
    )


@pytest.fixture
def context() -> ToolContext:
    return make_context()


def run_python(code: str, context: ToolContext) -> str:
    return run_code_run({"language": "python", "code": code}, context)


def run_shell(code: str, context: ToolContext) -> str:
    return run_code_run({"language": "shell", "code": code}, context)


def stdout_of(result_text: str) -> str:
    return result_text.split("\nstdout:\n", 1)[1].split("\n\nstderr:\n", 1)[0]
