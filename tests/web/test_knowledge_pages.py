"""Knowledge bases as pages: list, create, documents (upload, status, delete), search, roles, tenants."""

from collections.abc import Callable
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from files.models import KnowledgeBase, KnowledgeDocument, StoredFile
from files.services import knowledge_base_create, knowledge_document_add
from files.tasks import process_file_task
from tests.files.documents import png_bytes
from tests.web.conftest import World
from tests.web.knowledge import actor_of, estate_knowledge_base

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def estate(world: World, *, with_document: bool = False) -> KnowledgeBase:
    alice = actor_of(world.cast.alice, world.cast.tenant_a)
    return estate_knowledge_base(alice, agents=[world.agent_a], with_handbook=with_document)


def test_the_list_shows_each_knowledge_base_with_its_documents_and_agents(
    world: World, client_for: ClientFor
) -> None:
    estate(world, with_document=True)
    knowledge_base_create(actor=actor_of(world.cast.carol, world.cast.tenant_b), name="Carol's notes")

    body = client_for(world.cast.bob).get("/knowledge/").content.decode()

    assert '<a href="/knowledge/' in body and ">Estate</a>" in body
    assert "The estate&#x27;s handbook" in body
    assert "<span data-document-count>1 document</span>" in body
    assert f'<a href="/agents/{world.agent_a.pk}/">Helper</a>' in body
    assert "Carol" not in body
    assert 'href="/knowledge/new/"' not in body


def test_an_admin_creates_a_knowledge_base_with_agents(world: World, client_for: ClientFor) -> None:
    client = client_for(world.dave)
    assert 'href="/knowledge/new/"' in client.get("/knowledge/").content.decode()

    response = client.post(
        "/knowledge/new/", {"name": "Policies", "description": "HR rules", "agents": [str(world.agent_a.pk)]}
    )

    created = KnowledgeBase.objects.get(tenant=world.cast.tenant_a, name="Policies")
    assert response.status_code == 302 and response["Location"] == f"/knowledge/{created.pk}/"
    assert (created.description, list(created.agents.all())) == ("HR rules", [world.agent_a])


def test_a_duplicate_name_or_another_tenants_agent_is_a_field_error(
    world: World, client_for: ClientFor
) -> None:
    estate(world)
    client = client_for(world.dave)

    duplicate = client.post("/knowledge/new/", {"name": "Estate"})
    foreign_agent = client.post("/knowledge/new/", {"name": "Other", "agents": [str(world.agent_b.pk)]})

    assert duplicate.status_code == 400
    assert "A knowledge base with this name already exists." in duplicate.content.decode()
    assert foreign_agent.status_code == 400
    assert "Select a valid choice." in foreign_agent.content.decode()
    assert KnowledgeBase.objects.filter(tenant=world.cast.tenant_a).count() == 1


def test_an_admin_edits_the_name_and_agents(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate(world)

    response = client_for(world.dave).post(
        f"/knowledge/{knowledge_base.pk}/edit/", {"name": "Estate handbook", "description": ""}
    )

    knowledge_base.refresh_from_db()
    assert response.status_code == 302
    assert (knowledge_base.name, knowledge_base.description, list(knowledge_base.agents.all())) == (
        "Estate handbook",
        "",
        [],
    )


def test_the_detail_page_lists_documents_with_status_pages_and_size(
    world: World, client_for: ClientFor
) -> None:
    knowledge_base = estate(world, with_document=True)
    broken = SimpleUploadedFile("broken.pdf", b"%PDF-1.4 not really a pdf", content_type="application/pdf")
    failed = knowledge_document_add(
        actor=actor_of(world.cast.alice, world.cast.tenant_a), knowledge_base=knowledge_base, upload=broken
    )
    process_file_task(str(failed.file_id))
    reason = StoredFile.objects.get(pk=failed.file_id).status_reason

    body = client_for(world.dave).get(f"/knowledge/{knowledge_base.pk}/").content.decode()

    assert "Documents (2)" in body
    assert '<span class="document-name">estate-handbook.pdf</span>' in body
    assert '<span class="badge tone-ok" data-file-status>ready</span>' in body
    assert "2 pages · " in body
    assert '<span class="badge tone-error" data-file-status>failed</span>' in body
    assert reason and f'<p class="small run-error">{reason}</p>' in body
    assert 'enctype="multipart/form-data"' in body


def test_an_admin_uploads_a_document_and_it_is_queued(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate(world)
    notes = SimpleUploadedFile("notes.txt", b"Roses are watered on Tuesdays.\n", content_type="text/plain")

    response = client_for(world.dave).post(f"/knowledge/{knowledge_base.pk}/documents/", {"file": notes})

    document = KnowledgeDocument.objects.get(knowledge_base=knowledge_base)
    assert response.status_code == 302
    assert (document.file.name, document.file.status, document.added_by) == (
        "notes.txt",
        "queued",
        world.dave,
    )


def test_an_unreadable_upload_shows_the_reason_and_stores_nothing(
    world: World, client_for: ClientFor
) -> None:
    knowledge_base = estate(world)
    program = SimpleUploadedFile(
        "tool.exe", b"MZ\x90\x00" + bytes(200), content_type="application/octet-stream"
    )
    image = SimpleUploadedFile("photo.png", png_bytes(4, 4), content_type="image/png")
    client = client_for(world.dave)

    refused = client.post(f"/knowledge/{knowledge_base.pk}/documents/", {"file": program})
    picture = client.post(f"/knowledge/{knowledge_base.pk}/documents/", {"file": image})

    assert refused.status_code == 400 and "tool.exe: " in refused.content.decode()
    assert picture.status_code == 400
    assert "knowledge bases hold documents to search" in picture.content.decode()
    assert StoredFile.objects.filter(tenant=world.cast.tenant_a).count() == 0


def test_an_admin_deletes_a_document_then_the_knowledge_base(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate(world, with_document=True)
    document = KnowledgeDocument.objects.get(knowledge_base=knowledge_base)
    client = client_for(world.dave)
    page = client.get(f"/knowledge/{knowledge_base.pk}/").content.decode()
    assert f'data-confirm="delete-document-{document.pk}"' in page
    assert 'data-confirm="delete-knowledge-base"' in page

    removed = client.post(f"/knowledge/{knowledge_base.pk}/documents/{document.pk}/delete/")
    assert removed.status_code == 302
    assert not StoredFile.objects.filter(pk=document.file_id).exists()

    deleted = client.post(f"/knowledge/{knowledge_base.pk}/delete/")
    assert deleted.status_code == 302 and deleted["Location"] == "/knowledge/"
    assert not KnowledgeBase.objects.filter(pk=knowledge_base.pk).exists()


def test_search_shows_passages_with_their_document_and_page(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate(world, with_document=True)
    client = client_for(world.cast.bob)

    found = client.get(f"/knowledge/{knowledge_base.pk}/", {"q": "capybaras hay"}).content.decode()
    nothing = client.get(f"/knowledge/{knowledge_base.pk}/", {"q": "zeppelin"}).content.decode()

    assert '<p class="passage-source"><strong>estate-handbook.pdf</strong> · p. 2</p>' in found
    assert "forty kilograms of hay" in found
    assert "No passage matches “zeppelin”." in nothing


def test_a_member_reads_but_cannot_manage(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate(world, with_document=True)
    document = KnowledgeDocument.objects.get(knowledge_base=knowledge_base)
    client = client_for(world.cast.bob)
    notes = SimpleUploadedFile("notes.txt", b"Some notes.\n", content_type="text/plain")

    page = client.get(f"/knowledge/{knowledge_base.pk}/")
    refusals = [
        client.get("/knowledge/new/").status_code,
        client.post("/knowledge/new/", {"name": "Mine"}).status_code,
        client.post(f"/knowledge/{knowledge_base.pk}/edit/", {"name": "Renamed"}).status_code,
        client.post(f"/knowledge/{knowledge_base.pk}/documents/", {"file": notes}).status_code,
        client.post(f"/knowledge/{knowledge_base.pk}/documents/{document.pk}/delete/").status_code,
        client.post(f"/knowledge/{knowledge_base.pk}/delete/").status_code,
    ]

    body = page.content.decode()
    assert page.status_code == 200 and "estate-handbook.pdf" in body
    assert "data-confirm=" not in body and "multipart/form-data" not in body and "/edit/" not in body
    assert refusals == [403] * 6
    knowledge_base.refresh_from_db()
    assert knowledge_base.name == "Estate"
    assert list(KnowledgeBase.objects.filter(tenant=world.cast.tenant_a)) == [knowledge_base]
    assert list(KnowledgeDocument.objects.values_list("pk", flat=True)) == [document.pk]


def test_another_tenant_gets_404_on_every_knowledge_page_and_nothing_changes(
    world: World, client_for: ClientFor
) -> None:
    knowledge_base = estate(world, with_document=True)
    document = KnowledgeDocument.objects.get(knowledge_base=knowledge_base)
    carol = client_for(world.cast.carol)
    notes = SimpleUploadedFile("notes.txt", b"Carol's notes.\n", content_type="text/plain")
    base = f"/knowledge/{knowledge_base.pk}"

    statuses = [
        carol.get(f"{base}/").status_code,
        carol.get(f"{base}/", {"q": "hay"}).status_code,
        carol.get(f"{base}/edit/").status_code,
        carol.post(f"{base}/edit/", {"name": "Carol's now"}).status_code,
        carol.post(f"{base}/documents/", {"file": notes}).status_code,
        carol.post(f"{base}/documents/{document.pk}/delete/").status_code,
        carol.post(f"{base}/delete/").status_code,
    ]

    assert statuses == [404] * 7
    knowledge_base.refresh_from_db()
    assert (knowledge_base.name, list(knowledge_base.agents.all())) == ("Estate", [world.agent_a])
    assert list(KnowledgeDocument.objects.values_list("pk", flat=True)) == [document.pk]
    assert StoredFile.objects.count() == 1
    assert "Estate" not in carol.get("/knowledge/").content.decode()
