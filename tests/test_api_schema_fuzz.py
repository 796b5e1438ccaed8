"""Schemathesis over /api/v1/schema/: every operation, every check, with a real key and real ids.

The API runs in this process (Django's WSGI handler) against the test database, so the cast's
objects are what the generated requests find. ``make test`` runs the explicit examples and a
bounded number of generated ones (positive and negative) per operation. ``SCHEMATHESIS_COVERAGE=1``
adds schemathesis's coverage phase (every boundary value, unexpected methods: about two thousand
requests, minutes rather than seconds), worth a run after changing the API.
"""

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from schemathesis.config import SchemathesisConfig
from schemathesis.core.parameters import ParameterLocation

from audit.models import AuditEntry
from config.wsgi import application
from tests.conftest import Cast
from tests.factories import make_api_key
from tests.fake_model_server import FakeModelServer
from tests.tenant_objects import make_one_of_each

MAX_EXAMPLES = 10
IS_COVERAGE_PHASE_ON = os.environ.get("SCHEMATHESIS_COVERAGE", "") == "1"

# Schema-valid bodies these operations may still refuse with a 400, by rules over the tenant's data
# that a schema cannot state: unique names, references to other objects (users, tools, tool calls),
# an object's state (only a pending memory is approved, only a failed run retried, only an
# asked question answered, with one of its choices), a provider's
# own temperature range, transports that need a URL, URLs the outbound guard refuses, one
# provider key per provider, amounts of credits above zero, credits turned on only once granted,
# one budget per member or agent, and a usage report's range of days.
RULES_OVER_DATA = [
    ("POST", "/api/v1/agents/"),
    ("PUT", "/api/v1/agents/{id}/"),
    ("PATCH", "/api/v1/agents/{id}/"),
    ("PUT", "/api/v1/agents/{agent_pk}/tools/"),
    ("PATCH", "/api/v1/agents/{agent_pk}/tools/"),
    ("POST", "/api/v1/agents/{agent_pk}/memories/"),
    ("PATCH", "/api/v1/memories/{id}/"),
    ("POST", "/api/v1/memories/{id}/approve/"),
    ("POST", "/api/v1/memories/{id}/reject/"),
    ("POST", "/api/v1/mcp-servers/"),
    ("PUT", "/api/v1/mcp-servers/{id}/"),
    ("PATCH", "/api/v1/mcp-servers/{id}/"),
    ("POST", "/api/v1/tools/"),
    ("PATCH", "/api/v1/tools/{id}/"),
    ("POST", "/api/v1/provider-keys/"),
    ("PUT", "/api/v1/provider-keys/{id}/"),
    ("PATCH", "/api/v1/provider-keys/{id}/"),
    ("POST", "/api/v1/credits/grant/"),
    ("PATCH", "/api/v1/credits/"),
    ("POST", "/api/v1/budgets/"),
    ("PUT", "/api/v1/budgets/{id}/"),
    ("PATCH", "/api/v1/budgets/{id}/"),
    ("POST", "/api/v1/runs/{id}/approve/"),
    ("POST", "/api/v1/runs/{id}/answer/"),
    ("POST", "/api/v1/runs/{id}/retry/"),
    # the report's range: until on or after since, at most 366 days
    ("GET", "/api/v1/usage/"),
    # unique knowledge base names, agents of the tenant; attachments uploaded to the session
    ("POST", "/api/v1/knowledge-bases/"),
    ("PATCH", "/api/v1/knowledge-bases/{id}/"),
    ("POST", "/api/v1/sessions/{id}/messages/"),
    # branches: a parent, a leaf or a branch to show must be a message of that conversation; only
    # an answer of the conversation is regenerated
    ("GET", "/api/v1/sessions/{id}/messages/"),
    ("POST", "/api/v1/sessions/{id}/branch/"),
    ("POST", "/api/v1/runs/{id}/regenerate/"),
]
# Any bytes fit a file field's schema; what they are (empty, too large, not a document Agentry
# reads) is told from the bytes themselves: 400, 413 or 415.
UPLOADS = [("POST", "/api/v1/files/"), ("POST", "/api/v1/knowledge-bases/{id}/documents/")]
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429", "5xx"]
CONFIG = SchemathesisConfig.from_dict(
    {
        "generation": {"max-examples": MAX_EXAMPLES},
        "phases": {"coverage": {"enabled": IS_COVERAGE_PHASE_ON}},
        "operations": [
            {
                "include-name": f"{method} {path}",
                "checks": {"positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400"]}},
            }
            for method, path in RULES_OVER_DATA
        ]
        + [
            {
                "include-name": f"{method} {path}",
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": [*ACCEPTED, "400", "413", "415"]}
                },
            }
            for method, path in UPLOADS
        ],
    }
)
schema = schemathesis.openapi.from_wsgi("/api/v1/schema/", application, config=CONFIG)


@pytest.fixture
def in_process_requests(db: None) -> Iterator[None]:
    # As Django's test client does: a request's end must not close the connection that holds
    # the test's transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def tenant_objects(cast: Cast, in_process_requests: None, fake_model: FakeModelServer) -> dict[str, str]:
    """Tenant A's objects, by the path prefix whose ``{id}`` names one (a provider key's test
    call goes to the fake model server, the platform's base URL here)."""
    objects = make_one_of_each(cast)
    audit_entry = AuditEntry.objects.filter(tenant=cast.tenant_a).first()
    assert audit_entry is not None  # the writes above recorded theirs
    return {
        "credits": str(objects.ledger_entry.pk),
        "budgets": str(objects.budget.pk),
        "key": make_api_key(tenant=cast.tenant_a, user=cast.alice),
        "provider-keys": str(objects.provider_key.pk),
        "agents": str(objects.agent.pk),
        "sessions": str(objects.session.pk),
        "runs": str(objects.run.pk),
        "memories": str(objects.memory.pk),
        "tools": str(objects.tool.pk),
        "mcp-servers": str(objects.server.pk),
        "audit": str(audit_entry.pk),
        "files": str(objects.attachment.pk),
        "knowledge-bases": str(objects.knowledge_base.pk),
    }


def with_real_ids(case: Any, objects: dict[str, str]) -> None:
    collection = case.operation.path.removeprefix("/api/v1/").split("/", 1)[0]
    for name in case.path_parameters or {}:
        if name == "id":
            case.path_parameters[name] = objects[collection]
        elif name.endswith("_pk"):
            case.path_parameters[name] = objects[name.removesuffix("_pk") + "s"]


def is_negative_at(case: Any, location: ParameterLocation) -> bool:
    return bool(case.meta and case.meta.is_negative_at(location))


# derandomize: the same examples on every run, so a failure is reproducible and never a flake; no
# example database (it would write .hypothesis/ into the working tree).
@schema.parametrize()
@hypothesis_settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_matches_its_schema(case: Any, tenant_objects: dict[str, str]) -> None:
    if not is_negative_at(case, ParameterLocation.PATH):
        with_real_ids(case, tenant_objects)
    # A case whose invalid part is its Authorization header keeps it: the key must not repair it.
    is_bad_credential = is_negative_at(case, ParameterLocation.HEADER)
    credentials = None if is_bad_credential else {"Authorization": f"Bearer {tenant_objects['key']}"}
    case.call_and_validate(headers=credentials)
