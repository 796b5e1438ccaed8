"""Embedding backends: an OpenAI-compatible endpoint (a real local HTTP server), the optional
sentence-transformers extra, and the hybrid ranking they feed."""

import json
import time
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command

from agents.models import Agent
from memory.embeddings import (
    EmbeddingError,
    HashingTestEmbeddings,
    OpenAICompatibleEmbeddings,
    dot,
    embedding_backend,
    is_sentence_transformers_installed,
)
from memory.models import Memory
from memory.retrieval import search_memories
from memory.services import memory_create
from tenants.actors import Actor
from tests.conftest import Cast
from tests.memory.factories import make_memory
from tests.tools import LocalServer, RecordedRequest, Reply


def _vector_for(text: str) -> list[float]:
    """The fake model's "meaning": cats and felines are one topic, everything else another."""
    lowered = text.lower()
    return [1.0, 0.0, 0.0] if ("cat" in lowered or "feline" in lowered) else [0.0, 1.0, 0.0]


def _embeddings_route(request: RecordedRequest) -> Reply:
    body = json.loads(request.body)
    data = [{"index": index, "embedding": _vector_for(text)} for index, text in enumerate(body["input"])]
    return Reply(200, json.dumps({"data": list(reversed(data)), "model": body["model"]}))


@pytest.fixture
def server() -> Iterator[LocalServer]:
    with LocalServer() as local:
        local.routes["/v1/embeddings"] = _embeddings_route
        yield local


@pytest.fixture
def openai_embeddings(server: LocalServer, settings: Any) -> LocalServer:
    settings.MEMORY_EMBEDDINGS_BACKEND = "openai"
    settings.MEMORY_EMBEDDINGS_URL = server.url("/v1")
    settings.MEMORY_EMBEDDINGS_MODEL = "tiny-embedder"
    settings.MEMORY_EMBEDDINGS_API_KEY = "embedding-key"
    settings.MEMORY_EMBEDDINGS_TIMEOUT_SECONDS = 2.0
    return server


def test_the_openai_compatible_backend_posts_inputs_and_orders_vectors_by_index(server: LocalServer) -> None:
    server.routes["/v1/embeddings"] = Reply(
        200,
        json.dumps({"data": [{"index": 1, "embedding": [0, 3, 4]}, {"index": 0, "embedding": [3, 4, 0]}]}),
    )
    backend = OpenAICompatibleEmbeddings(url=server.url("/v1/"), model="m", api_key="k", timeout_seconds=2)
    assert backend.embed(["first", "second"]) == [[0.6, 0.8, 0.0], [0.0, 0.6, 0.8]]
    (request,) = server.requests
    assert (request.path, request.headers["authorization"]) == ("/v1/embeddings", "Bearer k")
    assert json.loads(request.body) == {"model": "m", "input": ["first", "second"]}


@pytest.mark.parametrize(("status", "is_retryable"), [(500, True), (429, True), (400, False), (401, False)])
def test_endpoint_errors_tell_retryable_from_final(
    server: LocalServer, status: int, is_retryable: bool
) -> None:
    server.routes["/v1/embeddings"] = Reply(status, "nope")
    backend = OpenAICompatibleEmbeddings(url=server.url("/v1"), model="m", api_key="", timeout_seconds=2)
    with pytest.raises(EmbeddingError) as failed:
        backend.embed(["x"])
    assert failed.value.is_retryable is is_retryable


def test_a_slow_endpoint_times_out(server: LocalServer) -> None:
    def slow(request: RecordedRequest) -> Reply:
        time.sleep(1.0)
        return _embeddings_route(request)

    server.routes["/v1/embeddings"] = slow
    backend = OpenAICompatibleEmbeddings(url=server.url("/v1"), model="m", api_key="", timeout_seconds=0.2)
    started = time.monotonic()
    with pytest.raises(EmbeddingError) as failed:
        backend.embed(["x"])
    assert failed.value.is_retryable is True
    assert time.monotonic() - started < 0.9


def test_malformed_answers_are_final_errors(server: LocalServer) -> None:
    server.routes["/v1/embeddings"] = Reply(200, json.dumps({"data": [{"index": 0}]}))
    backend = OpenAICompatibleEmbeddings(url=server.url("/v1"), model="m", api_key="", timeout_seconds=2)
    with pytest.raises(EmbeddingError) as failed:
        backend.embed(["x"])
    assert failed.value.is_retryable is False


def test_memories_are_embedded_on_save_and_found_by_meaning(
    cast: Cast, agent: Agent, openai_embeddings: LocalServer
) -> None:
    actor = Actor(user=cast.alice, tenant=cast.tenant_a, role="owner")
    cat = memory_create(actor=actor, agent=agent, content="The user has a cat named Miso.")
    memory_create(actor=actor, agent=agent, content="The user plays chess on Sundays.")
    assert (cat.embedding, cat.embedding_model) == ([1.0, 0.0, 0.0], "openai:tiny-embedder")

    results = search_memories(tenant=cast.tenant_a, agent=agent, query="a feline companion")
    assert [(item.memory.content, item.vector_similarity) for item in results] == [
        ("The user has a cat named Miso.", 1.0)
    ]


def test_search_falls_back_to_full_text_when_the_endpoint_fails(
    cast: Cast, agent: Agent, openai_embeddings: LocalServer
) -> None:
    openai_embeddings.routes["/v1/embeddings"] = Reply(503, "down")
    actor = Actor(user=cast.alice, tenant=cast.tenant_a, role="owner")
    memory = memory_create(actor=actor, agent=agent, content="The user has a cat named Miso.")
    assert (memory.embedding, memory.embedding_model) == (None, "")
    results = search_memories(tenant=cast.tenant_a, agent=agent, query="cat")
    assert [(item.memory.content, item.vector_similarity) for item in results] == [
        ("The user has a cat named Miso.", None)
    ]


def test_vectors_of_another_model_are_never_compared(
    cast: Cast, agent: Agent, openai_embeddings: Any
) -> None:
    make_memory(
        agent=agent, content="The user has a cat.", embedding=[1.0, 0.0, 0.0], embedding_model="other"
    )
    assert search_memories(tenant=cast.tenant_a, agent=agent, query="feline") == []

    output = StringIO()
    call_command("memory_reindex", "--embeddings", stdout=output)
    assert output.getvalue().splitlines() == ["Full-text index rebuilt.", "1 memories re-embedded."]
    assert Memory.objects.get().embedding_model == "openai:tiny-embedder"
    assert [
        item.memory.content for item in search_memories(tenant=cast.tenant_a, agent=agent, query="feline")
    ] == ["The user has a cat."]


@pytest.mark.skipif(is_sentence_transformers_installed(), reason="the optional extra is installed here")
def test_sentence_transformers_is_hidden_when_not_installed(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.MEMORY_EMBEDDINGS_BACKEND = "sentence-transformers"
    assert embedding_backend() is None
    assert "sentence-transformers is not installed" in caplog.text


@pytest.mark.parametrize("name", ["none", "bogus"])
def test_no_backend_unless_one_is_configured(settings: Any, name: str) -> None:
    settings.MEMORY_EMBEDDINGS_BACKEND = name
    assert embedding_backend() is None


def test_the_test_hashing_backend_is_deterministic_and_unit_length() -> None:
    backend = HashingTestEmbeddings()
    first, again, other = backend.embed(
        ["The dog barks at thunderstorms", "The dog barks at thunderstorms", "tax"]
    )
    assert first == again
    assert dot(first, first) == pytest.approx(1.0)
    assert dot(first, other) < 0.5


def test_the_sentence_transformers_backend_runs_the_local_model(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    from memory.embeddings import _sentence_transformer

    class FakeModel:
        def __init__(self, name: str) -> None:
            self.name = name

        def encode(self, texts: list[str], normalize_embeddings: bool) -> list[list[float]]:
            return [[3.0, 4.0] for _ in texts]

    module = types.ModuleType("sentence_transformers")
    module.SentenceTransformer = FakeModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", module)
    monkeypatch.setattr("memory.embeddings.is_sentence_transformers_installed", lambda: True)
    settings.MEMORY_EMBEDDINGS_BACKEND = "sentence-transformers"
    settings.MEMORY_SENTENCE_TRANSFORMERS_MODEL = "tiny-local"
    _sentence_transformer.cache_clear()
    try:
        backend = embedding_backend()
        assert backend is not None and backend.name == "sentence-transformers:tiny-local"
        assert backend.embed(["one", "two"]) == [[0.6, 0.8], [0.6, 0.8]]
    finally:
        _sentence_transformer.cache_clear()
