"""The memory settings and their defaults; ``config/settings.py`` may set any of them from the env."""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Retrieval: score = relevance * importance weight * recency weight.
    "MEMORY_RECENCY_HALF_LIFE_DAYS": 30.0,
    # The share of the recency weight that never decays: an old but relevant fact still counts.
    "MEMORY_RECENCY_FLOOR": 0.2,
    "MEMORY_CONTEXT_LIMIT": 5,
    "MEMORY_MAX_PER_AGENT": 10_000,
    # none | openai | sentence-transformers | test-hashing (deterministic, for tests only)
    "MEMORY_EMBEDDINGS_BACKEND": "none",
    "MEMORY_EMBEDDINGS_URL": "",
    "MEMORY_EMBEDDINGS_MODEL": "text-embedding-3-small",
    "MEMORY_EMBEDDINGS_API_KEY": "",
    "MEMORY_EMBEDDINGS_TIMEOUT_SECONDS": 10.0,
    "MEMORY_SENTENCE_TRANSFORMERS_MODEL": "all-MiniLM-L6-v2",
    # Vector similarity is computed in Python over at most this many of the agent's memories
    # (most recently updated first) plus the full-text candidates.
    "MEMORY_VECTOR_SCAN_LIMIT": 1000,
    # Extraction: a session idle this long is mined for suggestions; 0 turns it off.
    "MEMORY_EXTRACTION_IDLE_SECONDS": 1800,
    "MEMORY_EXTRACTION_BATCH_SIZE": 50,
}


def memory_setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
