"""A parameter no field accepts (a NUL, which PostgreSQL refuses even in a search) answers the
site's 400 page on every page, and changes nothing."""

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from sessions.models import Message
from tests.web.conftest import World
from web.access import UNSTORABLE_PARAMETER

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "path",
    ["/agents/?q=a%00b", "/memories/?q=a%00b", "/chat/sessions/?q=a%00b", "/audit/?q=a%00", "/tools/?a%00=1"],
)
def test_a_parameter_with_a_null_character_answers_400(
    world: World, client_for: Callable[[Any], Client], path: str
) -> None:
    response = client_for(world.cast.alice).get(path)

    assert response.status_code == 400
    assert UNSTORABLE_PARAMETER in response.content.decode()


def test_a_chat_message_with_a_null_character_answers_400_and_stores_nothing(
    world: World, client_for: Callable[[Any], Client]
) -> None:
    before = Message.objects.filter(session=world.session_a).count()

    response = client_for(world.cast.bob).post(f"/chat/{world.session_a.pk}/send/", {"content": "a\x00b"})

    assert response.status_code == 400
    assert UNSTORABLE_PARAMETER in response.content.decode()
    assert Message.objects.filter(session=world.session_a).count() == before
