"""One of each kind of a tenant's objects, made through the services as people make them: what
the tests that walk every endpoint or every page need to find."""

from dataclasses import dataclass
from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import Agent
from billing.models import Budget, LedgerEntry
from billing.services import budget_create, credits_grant
from files.models import FilePurpose, KnowledgeBase, StoredFile
from files.services import file_upload, knowledge_base_create, knowledge_document_add
from mcp_servers.models import McpServer
from mcp_servers.services import mcp_server_create
from memory.models import Memory
from memory.services import memory_create
from sessions.models import Run, Session
from sessions.services import session_create, session_post_message
from tenants.actors import actor_for_user
from tenants.models import ProviderKey
from tenants.provider_keys.services import provider_key_create
from tests.conftest import Cast
from tests.factories import make_agent
from tools.models import Tool
from tools.services import http_tool_create


@dataclass(frozen=True)
class TenantObjects:
    agent: Agent
    session: Session
    run: Run
    memory: Memory
    tool: Tool
    server: McpServer
    provider_key: ProviderKey
    ledger_entry: LedgerEntry
    budget: Budget
    knowledge_base: KnowledgeBase
    attachment: StoredFile


def make_one_of_each(cast: Cast, **agent_fields: Any) -> TenantObjects:
    """Tenant A's objects, made by its owner; the knowledge base holds one document."""
    actor = actor_for_user(cast.alice, preferred_tenant_id=None)
    agent = make_agent(tenant=cast.tenant_a, **agent_fields)
    session = session_create(actor=actor, agent=agent, title="fuzzed")
    knowledge_base = knowledge_base_create(actor=actor, name="Handbook", agent_ids=[agent.pk])
    knowledge_document_add(
        actor=actor, knowledge_base=knowledge_base, upload=SimpleUploadedFile("doc.md", b"# Doc\nTea.")
    )
    return TenantObjects(
        agent=agent,
        session=session,
        run=session_post_message(actor=actor, session=session, content="hello").run,
        memory=memory_create(actor=actor, agent=agent, content="likes tea"),
        tool=http_tool_create(actor=actor, name="lookup", url_template="https://api.example.com/{q}"),
        server=mcp_server_create(
            actor=actor, name="docs", transport="streamable_http", url="https://mcp.example.com/mcp"
        ),
        provider_key=provider_key_create(actor=actor, provider="anthropic", api_key="sk-ant-fuzzed-key"),
        ledger_entry=credits_grant(tenant=cast.tenant_a, amount_micros=1_000_000, granted_by=cast.alice),
        budget=budget_create(actor=actor, scope="agent", agent_id=agent.pk, monthly_limit="5"),
        knowledge_base=knowledge_base,
        attachment=file_upload(
            actor=actor,
            upload=SimpleUploadedFile("notes.md", b"# Notes\nTea at four."),
            purpose=FilePurpose.ATTACHMENT,
            session=session,
        ),
    )
