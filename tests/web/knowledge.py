"""Knowledge bases with a processed handbook, and answers that cite it, for the page and browser tests."""

from typing import Any

from django.core.files.uploadedfile import SimpleUploadedFile

from agents.models import Agent
from files.models import Chunk, Citation, KnowledgeBase, KnowledgeDocument
from files.services import knowledge_base_create, knowledge_document_add
from files.tasks import process_file_task
from sessions.models import Run
from tenants.actors import Actor
from tenants.models import Membership
from tests.files.documents import pdf_bytes

HAY_SENTENCE = "The capybaras eat forty kilograms of hay each week."


def actor_of(user: Any, tenant: Any) -> Actor:
    membership = Membership.objects.get(user=user, tenant=tenant)
    return Actor(tenant=tenant, user=user, role=membership.role)


def handbook_upload() -> SimpleUploadedFile:
    """Two pages; the second says how much hay the capybaras eat."""
    pages = ["Gardens and paths.", f"Feeding. {HAY_SENTENCE}"]
    return SimpleUploadedFile("estate-handbook.pdf", pdf_bytes(pages), content_type="application/pdf")


def estate_knowledge_base(actor: Actor, *, agents: list[Agent], with_handbook: bool = True) -> KnowledgeBase:
    knowledge_base = knowledge_base_create(
        actor=actor,
        name="Estate",
        description="The estate's handbook",
        agent_ids=[agent.pk for agent in agents],
    )
    if with_handbook:
        document = knowledge_document_add(
            actor=actor, knowledge_base=knowledge_base, upload=handbook_upload()
        )
        process_file_task(str(document.file_id))
    return knowledge_base


def cite_handbook_page(run: Run, knowledge_base: KnowledgeBase, *, page: int, number: int = 1) -> Citation:
    """Record that ``run``'s file_search returned the handbook's passage on ``page`` as [number]."""
    document = KnowledgeDocument.objects.get(knowledge_base=knowledge_base)
    chunk = Chunk.objects.get(file_id=document.file_id, page=page)
    return Citation.objects.create(tenant=run.tenant, run=run, number=number, chunk=chunk)
