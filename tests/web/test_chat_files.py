"""Files in the chat as the server renders them: a message's attachments, an answer's sources."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from files.models import StoredFile
from sessions.consumers import post_message
from sessions.models import Message, MessageRole
from tests.files.documents import png_bytes
from tests.web.conftest import World, finished_conversation
from tests.web.knowledge import HAY_SENTENCE, actor_of, cite_handbook_page, estate_knowledge_base

pytestmark = pytest.mark.django_db

ClientFor = Callable[[Any], Client]


def test_a_message_shows_its_image_as_a_thumbnail_and_its_document_as_a_chip(
    world: World, client_for: ClientFor
) -> None:
    run = finished_conversation(world.session_a, question="What is in these?", answer="A photo and notes.")
    question = Message.objects.get(pk=run.user_message_id)
    question.content = [
        {"type": "text", "text": "What is in these?"},
        {
            "type": "attachment",
            "file_id": "0c1d",
            "name": "view.png",
            "content_type": "image/png",
            "size": 2048,
        },
        {
            "type": "attachment",
            "file_id": "9f8e",
            "name": "notes.txt",
            "content_type": "text/plain",
            "size": 120,
        },
    ]
    question.save(update_fields=["content"])

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    assert (
        '<a class="attachment-image" href="/api/v1/files/0c1d/download/" target="_blank" rel="noopener" '
        'title="view.png"><img src="/api/v1/files/0c1d/download/" alt="view.png" loading="lazy"></a>'
    ) in body
    assert (
        '<span class="attachment-name">notes.txt</span><span class="attachment-size">120\xa0bytes</span></a>'
    ) in body
    assert (
        '<a class="attachment-file" href="/api/v1/files/9f8e/download/"><svg class="attachment-icon"' in body
    )


def test_an_answer_shows_the_sources_it_cites_with_their_passage(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate_knowledge_base(
        actor_of(world.cast.alice, world.cast.tenant_a), agents=[world.agent_a]
    )
    run = finished_conversation(world.session_a, question="Hay?", answer="Forty kilograms a week [2].")
    cite_handbook_page(run, knowledge_base, page=1, number=1)
    cite_handbook_page(run, knowledge_base, page=2, number=2)

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    assert body.count("data-citation data-number=") == 1
    assert "[2] estate-handbook.pdf · p. 2</button>" in body
    assert 'data-page="2"' in body and HAY_SENTENCE in " ".join(body.split())
    assert '<dialog id="citation-dialog"' in body


def test_an_answer_without_markers_shows_no_sources(world: World, client_for: ClientFor) -> None:
    knowledge_base = estate_knowledge_base(
        actor_of(world.cast.alice, world.cast.tenant_a), agents=[world.agent_a]
    )
    cite_handbook_page(world.run_a, knowledge_base, page=2)

    body = client_for(world.cast.bob).get(f"/chat/{world.session_a.pk}/").content.decode()

    assert "data-citation data-number=" not in body


def test_a_message_sent_over_the_socket_carries_its_attachments(world: World) -> None:
    bob = actor_of(world.cast.bob, world.cast.tenant_a)
    image = StoredFile.objects.create(
        tenant=world.cast.tenant_a,
        purpose="attachment",
        session=world.session_a,
        uploaded_by=world.cast.bob,
        name="view.png",
        content_type="image/png",
        size=len(png_bytes(2, 2)),
        sha256="0" * 64,
        status="ready",
    )

    ack = post_message(
        bob, world.session_a, {"type": "message", "content": "Look", "attachments": [str(image.pk)]}
    )

    message = Message.objects.get(pk=ack["message_id"], role=MessageRole.USER)
    assert message.content == [
        {"type": "text", "text": "Look"},
        {
            "type": "attachment",
            "file_id": str(image.pk),
            "name": "view.png",
            "content_type": "image/png",
            "size": image.size,
        },
    ]
