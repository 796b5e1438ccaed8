from typing import Any

import pytest

from agents.models import Agent
from tests.conftest import Cast
from tests.factories import make_agent


@pytest.fixture
def agent(cast: Cast) -> Agent:
    return make_agent(tenant=cast.tenant_a, name="Helper")


@pytest.fixture
def no_embeddings(settings: Any) -> None:
    settings.MEMORY_EMBEDDINGS_BACKEND = "none"
