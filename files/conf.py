"""The knowledge-search settings and their defaults; ``config/settings.py`` may set any from the env.

Embeddings have one configuration for the whole platform: knowledge search uses the backend
``MEMORY_EMBEDDINGS_*`` configures (``memory.embeddings.embedding_backend``), so an operator
sets up one endpoint or model, and chunks and memories are embedded alike.
"""

from typing import Any

from django.conf import settings

DEFAULTS: dict[str, Any] = {
    # Without pgvector, vector similarity is computed in Python over at most this many of the
    # searched files' chunks (most recent first) plus the full-text candidates. The scan's cost
    # grows with it (docs/benchmarks.md); older chunks are then found by vectors only when full
    # text also finds them. With pgvector every chunk of the scope is compared, in SQL.
    "KNOWLEDGE_VECTOR_SCAN_LIMIT": 2_000,
}


def knowledge_setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])
