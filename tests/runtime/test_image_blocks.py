"""Image content blocks: what each provider receives, what they cost, and where their data never goes."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from agents.runtime.compaction import CompactionPolicy, ContextCompactor, render_transcript
from agents.runtime.offline import OFFLINE_MODEL_NAME, PROVIDER_HINT, OfflineModelClient
from agents.runtime.providers.anthropic_client import AnthropicModelClient
from agents.runtime.providers.openai_client import OpenAIModelClient
from agents.runtime.tokens import estimate_message_tokens, estimate_request_tokens
from agents.runtime.types import (
    ChatMessage,
    ContentBlock,
    ModelRequest,
    ModelResponseCompleted,
    TextDelta,
    ToolSpec,
    image_block,
)
from tests.fake_model_server import FakeModelServer, Turn
from tests.runtime.fakes import InMemoryRecorder, ScriptedModel
from tests.runtime.test_loop import text_block, text_turn

PIXELS = bytes(range(256)) * 48
ENCODED = base64.b64encode(PIXELS).decode("ascii")
PHOTO = image_block(data=PIXELS, media_type="image/png", name="photo.png", width=640, height=480)
WEATHER_TOOL = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


def image(*, width: int | None = 640, height: int | None = 480, data: bytes = PIXELS) -> ContentBlock:
    return image_block(data=data, media_type="image/png", name="photo.png", width=width, height=height)


def asking_about(*blocks: ContentBlock, tools: list[ToolSpec] | None = None) -> ModelRequest:
    content = [text_block("What is in this picture?"), *blocks]
    return ModelRequest(
        model="test-model",
        system="",
        messages=[ChatMessage(role="user", content=content)],
        tools=tools or [],
        timeout_seconds=10.0,
    )


@pytest.fixture
def server() -> Iterator[FakeModelServer]:
    with FakeModelServer() as fake:
        yield fake


def test_an_image_block_carries_its_bytes_in_base64_and_their_length() -> None:
    assert PHOTO == {
        "type": "image",
        "media_type": "image/png",
        "data": ENCODED,
        "name": "photo.png",
        "width": 640,
        "height": 480,
        "size": 12_288,
    }


@pytest.mark.parametrize("tools", [[], [WEATHER_TOOL]])
def test_anthropic_receives_an_image_block_with_a_base64_source(
    server: FakeModelServer, tools: list[ToolSpec]
) -> None:
    server.script(Turn(text="A photo."))
    client = AnthropicModelClient("test-key", base_url=server.url)

    list(client.stream(asking_about(PHOTO, tools=tools), should_stop=lambda: False))

    (request,) = server.requests
    expected_image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": ENCODED},
    }
    assert request.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, expected_image]}
    ]
    assert request.images == [expected_image]


def test_openai_receives_an_image_url_part_with_a_data_url(server: FakeModelServer) -> None:
    server.script(Turn(text="A photo."))
    client = OpenAIModelClient("test-key", base_url=server.openai_base_url)

    list(client.stream(asking_about(PHOTO), should_stop=lambda: False))

    (request,) = server.requests
    expected_image = {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{ENCODED}"}}
    assert request.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "What is in this picture?"}, expected_image]}
    ]
    assert request.images == [expected_image]


def test_openai_keeps_text_only_user_messages_as_a_string(server: FakeModelServer) -> None:
    server.script(Turn(text="Nothing to see."))
    client = OpenAIModelClient("test-key", base_url=server.openai_base_url)

    list(client.stream(asking_about(), should_stop=lambda: False))

    assert server.requests[0].body["messages"] == [{"role": "user", "content": "What is in this picture?"}]
    assert server.requests[0].images == []


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [(640, 480, 410), (100, 100, 14), (4000, 3000, 1600), (None, None, 1600), (640, None, 1600)],
)
def test_an_image_costs_a_fixed_estimate_from_its_dimensions(
    width: int | None, height: int | None, tokens: int
) -> None:
    with_image = asking_about(image(width=width, height=height))

    assert estimate_request_tokens(with_image) - estimate_request_tokens(asking_about()) == tokens
    assert (
        estimate_message_tokens(with_image.messages[0]) - estimate_message_tokens(asking_about().messages[0])
        == tokens
    )


def test_an_images_data_is_not_counted_as_text() -> None:
    small, large = asking_about(image(data=b"x")), asking_about(image(data=b"x" * 1_000_000))

    assert estimate_request_tokens(large) == estimate_request_tokens(small)


def test_the_summarizer_reads_an_image_as_its_label() -> None:
    messages = [
        ChatMessage(role="user", content=[text_block("Look at this."), PHOTO, image(width=None, height=None)])
    ]

    assert render_transcript(messages, max_characters=10_000) == (
        "User: Look at this.\n\n"
        "User: [image: photo.png, 640x480, image/png]\n\n"
        "User: [image: photo.png, image/png]"
    )


def test_compaction_sends_no_image_data_to_the_summarizer_nor_to_steps_and_events() -> None:
    older = ChatMessage(role="user", content=[text_block("Look at this."), PHOTO])
    later = [
        ChatMessage(role="assistant", content=[text_block("A photo.")]),
        ChatMessage(role="user", content=[text_block("Thanks.")]),
        ChatMessage(role="assistant", content=[text_block("You are welcome.")]),
        ChatMessage(role="user", content=[text_block("Bye.")]),
    ]
    model = ScriptedModel([text_turn("The user shared a photo.")])
    recorder = InMemoryRecorder()
    compactor = ContextCompactor(
        policy=CompactionPolicy(context_window_tokens=100_000), model=model, recorder=recorder
    )

    compaction = compactor.compact(
        ModelRequest(model="m", system="", messages=[older, *later]), reason="manual"
    )

    assert compaction is not None
    assert compaction.messages[1:] == later
    (summary_request,) = model.requests
    summarized = summary_request.messages[0].content[0]["text"]
    assert "User: [image: photo.png, 640x480, image/png]" in summarized
    assert ENCODED not in summarized
    assert ENCODED not in repr(recorder.events)
    assert ENCODED not in repr(recorder.steps)


def test_the_offline_model_says_what_it_knows_of_an_image_it_cannot_see() -> None:
    request = ModelRequest(
        model=OFFLINE_MODEL_NAME,
        system="",
        messages=[ChatMessage(role="user", content=[text_block("What is this?"), PHOTO])],
    )

    events = list(OfflineModelClient().stream(request, should_stop=lambda: False))

    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    assert text == (
        "I received an image (photo.png, image/png, 640\u00d7480 pixels, 12,288 bytes). "
        f"I am the offline demo model and cannot see what it shows. {PROVIDER_HINT}"
    )
    completed = events[-1]
    assert isinstance(completed, ModelResponseCompleted)
    # The text's tokens and the image's fixed estimate, not its base64 characters.
    prompt = '[{"content": [{"text": "What is this?", "type": "text"}], "role": "user"}]'
    assert completed.usage.input_tokens == -(-len(prompt) // 4) + 410


def test_the_offline_model_lists_several_images_and_omits_unknown_dimensions() -> None:
    gif = image_block(data=b"GIF89a", media_type="image/gif", name="spinner.gif")
    request = ModelRequest(
        model=OFFLINE_MODEL_NAME, system="", messages=[ChatMessage(role="user", content=[PHOTO, gif])]
    )

    events = list(OfflineModelClient().stream(request, should_stop=lambda: False))

    assert "".join(event.text for event in events if isinstance(event, TextDelta)) == (
        "I received 2 images (photo.png, image/png, 640\u00d7480 pixels, 12,288 bytes; "
        "spinner.gif, image/gif, 6 bytes). "
        f"I am the offline demo model and cannot see what they show. {PROVIDER_HINT}"
    )
