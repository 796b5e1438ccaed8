"""Embedding backends: none (the default), an OpenAI-compatible ``/embeddings`` endpoint, a local
sentence-transformers model (an optional extra, hidden when not installed), and a hashing
vectorizer that exists only so tests can exercise the vector path deterministically.

Every backend returns unit-length vectors, so cosine similarity is a dot product. A
backend's ``name`` is stored with each vector: vectors of another backend or model are
never compared with the query's.
"""

import functools
import hashlib
import importlib.util
import logging
import math
import re
from typing import Any, Protocol

import httpx

from memory.conf import memory_setting
from memory.fulltext import STOP_WORDS

logger = logging.getLogger(__name__)

MAX_BATCH = 64
MAX_INPUT_CHARACTERS = 8000


class EmbeddingError(Exception):
    """The backend could not embed; ``is_retryable`` tells transient failures from final ones."""

    def __init__(self, message: str, *, is_retryable: bool) -> None:
        super().__init__(message)
        self.is_retryable = is_retryable


class EmbeddingBackend(Protocol):
    name: str

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def unit_vector(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(value * value for value in values))
    return [value / norm for value in values] if norm > 0 else [0.0 for _ in values]


def dot(left: list[float], right: list[float]) -> float:
    if len(left) != len(right):
        return 0.0
    return math.fsum(a * b for a, b in zip(left, right, strict=True))


class OpenAICompatibleEmbeddings:
    """``POST {MEMORY_EMBEDDINGS_URL}/embeddings`` as OpenAI, Ollama, vLLM and others answer it."""

    def __init__(self, *, url: str, model: str, api_key: str, timeout_seconds: float) -> None:
        base = url.rstrip("/")
        self.endpoint = base if base.endswith("/embeddings") else f"{base}/embeddings"
        self.model = model
        self.api_key = api_key
        self.timeout_seconds = timeout_seconds
        self.name = f"openai:{model}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), MAX_BATCH):
            vectors.extend(
                self._embed_batch([text[:MAX_INPUT_CHARACTERS] for text in texts[start : start + MAX_BATCH]])
            )
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = httpx.post(
                self.endpoint,
                json={"model": self.model, "input": texts},
                headers=headers,
                timeout=self.timeout_seconds,
            )
        except httpx.TimeoutException as error:
            raise EmbeddingError(f"embeddings endpoint timed out: {error}", is_retryable=True) from error
        except httpx.TransportError as error:
            raise EmbeddingError(f"embeddings endpoint unreachable: {error}", is_retryable=True) from error
        if response.status_code >= 400:
            is_retryable = response.status_code == 429 or response.status_code >= 500
            raise EmbeddingError(
                f"embeddings endpoint answered {response.status_code}: {response.text[:200]}",
                is_retryable=is_retryable,
            )
        return self._vectors_from(response, expected=len(texts))

    def _vectors_from(self, response: httpx.Response, *, expected: int) -> list[list[float]]:
        try:
            items = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [unit_vector([float(value) for value in item["embedding"]]) for item in items]
        except (ValueError, KeyError, TypeError) as error:
            raise EmbeddingError(
                f"embeddings endpoint answered malformed JSON: {error}", is_retryable=False
            ) from error
        if len(vectors) != expected:
            raise EmbeddingError(
                f"embeddings endpoint returned {len(vectors)} vectors for {expected} inputs",
                is_retryable=False,
            )
        return vectors


def is_sentence_transformers_installed() -> bool:
    return importlib.util.find_spec("sentence_transformers") is not None


@functools.lru_cache(maxsize=2)
def _sentence_transformer(model_name: str) -> Any:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(model_name)


class SentenceTransformerEmbeddings:
    """A local model (``pip install sentence-transformers``); loaded once per process."""

    def __init__(self, *, model_name: str) -> None:
        self.model_name = model_name
        self.name = f"sentence-transformers:{model_name}"

    def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            model = _sentence_transformer(self.model_name)
            encoded = model.encode([text[:MAX_INPUT_CHARACTERS] for text in texts], normalize_embeddings=True)
        except (OSError, RuntimeError, ValueError) as error:  # a model that cannot load or run
            raise EmbeddingError(f"local embedding model failed: {error}", is_retryable=False) from error
        return [unit_vector([float(value) for value in vector]) for vector in encoded]


HASHING_TOKEN = re.compile(r"[^\W_]+")
HASHING_SUFFIXES = ("ings", "ing", "ies", "ied", "ed", "es", "s", "ly")


class HashingTestEmbeddings:
    """FOR TESTS ONLY: not a language model and not semantic.

    Hashes stemmed words and character trigrams into a fixed number of signed buckets, so
    spelling variants ("allergy", "allergic") land near each other. It lets the test suite
    exercise the vector path (storage, similarity, hybrid ranking) with no network and no
    model download; it must not be offered as a production backend.
    """

    name = "test-hashing"

    def __init__(self, *, dimensions: int = 512) -> None:
        self.dimensions = dimensions

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _features(self, text: str) -> list[tuple[str, float]]:
        features: list[tuple[str, float]] = []
        for word in HASHING_TOKEN.findall(text.lower()):
            if word in STOP_WORDS:
                continue
            stem = next(
                (word[: -len(s)] for s in HASHING_SUFFIXES if word.endswith(s) and len(word) > len(s) + 3),
                word,
            )
            features.append((f"w:{stem}", 1.0))
            padded = f"<{stem}>"
            features.extend((f"c:{padded[i : i + 3]}", 0.3) for i in range(len(padded) - 2))
        return features

    def _embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for feature, weight in self._features(text):
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "big") % self.dimensions
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign * weight
        return unit_vector(vector)


BACKEND_NAMES = ("none", "openai", "sentence-transformers", "test-hashing")


def embedding_backend() -> EmbeddingBackend | None:
    """The configured backend, or None: not configured, or its optional package is missing."""
    name = memory_setting("MEMORY_EMBEDDINGS_BACKEND")
    if name == "openai":
        url = memory_setting("MEMORY_EMBEDDINGS_URL")
        if not url:
            logger.warning(
                "MEMORY_EMBEDDINGS_BACKEND=openai needs MEMORY_EMBEDDINGS_URL; using full text only"
            )
            return None
        return OpenAICompatibleEmbeddings(
            url=url,
            model=memory_setting("MEMORY_EMBEDDINGS_MODEL"),
            api_key=memory_setting("MEMORY_EMBEDDINGS_API_KEY"),
            timeout_seconds=float(memory_setting("MEMORY_EMBEDDINGS_TIMEOUT_SECONDS")),
        )
    if name == "sentence-transformers":
        if not is_sentence_transformers_installed():
            logger.warning("sentence-transformers is not installed; using full text only")
            return None
        return SentenceTransformerEmbeddings(model_name=memory_setting("MEMORY_SENTENCE_TRANSFORMERS_MODEL"))
    if name == "test-hashing":
        return HashingTestEmbeddings()
    if name != "none":
        logger.warning(
            "unknown MEMORY_EMBEDDINGS_BACKEND %r (choose one of %s)", name, ", ".join(BACKEND_NAMES)
        )
    return None


def embed_or_none(backend: EmbeddingBackend, texts: list[str]) -> list[list[float]] | None:
    """Vectors for ``texts``, or None (logged) when the backend fails: search falls back to full text."""
    try:
        return backend.embed(texts)
    except EmbeddingError as error:
        logger.warning("embedding with %s failed: %s", backend.name, error)
        return None
