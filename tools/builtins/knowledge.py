"""The ``knowledge`` group: ``file_search`` over the agent's knowledge bases and the
session's attached documents, returning numbered passages the answer cites ([1], [2]…).

Scoped to the run's tenant, its agent's knowledge bases and its own session's attachments:
no argument names a knowledge base or a file, so a run cannot reach anyone else's.
"""

from typing import Any

from files.citations import citation_numbers
from files.models import FilePurpose, KnowledgeBase, StoredFile
from files.search import Passage, SearchScope, search_passages
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register

DEFAULT_LIMIT = 5
MAX_LIMIT = 10
MAX_QUERY_CHARACTERS = 1000


def search_scope(context: ToolContext) -> SearchScope:
    knowledge_bases = KnowledgeBase.objects.filter(tenant_id=context.tenant_id, agents=context.agent_id)
    attachments = StoredFile.objects.filter(
        tenant_id=context.tenant_id, session_id=context.session_id, purpose=FilePurpose.ATTACHMENT
    )
    return SearchScope(
        tenant_id=context.tenant_id,
        knowledge_base_ids=tuple(knowledge_bases.values_list("id", flat=True)) if context.agent_id else (),
        file_ids=tuple(attachments.values_list("id", flat=True)),
    )


def _located(passage: Passage) -> str:
    where = [passage.document]
    if passage.page is not None:
        where.append(f"page {passage.page}")
    if passage.heading:
        where.append(passage.heading)
    return ", ".join(where)


def _formatted(passages: list[Passage], numbers: dict[int, int]) -> str:
    entries = [
        f"[{numbers[passage.chunk_id]}] {_located(passage)}\n{passage.text.strip()}" for passage in passages
    ]
    return (
        "\n\n".join(entries)
        + "\n\nCite the passages your answer uses by their number in square brackets, e.g. [1]."
    )


def run_file_search(arguments: dict[str, Any], context: ToolContext) -> str:
    query = str(arguments.get("query", "")).strip()
    if not query:
        raise ToolError("query must not be empty")
    limit = int(arguments.get("limit") or DEFAULT_LIMIT)
    scope = search_scope(context)
    if not scope.knowledge_base_ids and not scope.file_ids:
        return "There is nothing to search: this agent has no knowledge base and no file is attached here."
    passages = search_passages(scope, query[:MAX_QUERY_CHARACTERS], limit=min(max(limit, 1), MAX_LIMIT))
    if not passages:
        return f"No passage matched {query!r}. Try other words, or fewer of them."
    numbers = citation_numbers(
        tenant_id=context.tenant_id,
        run_id=context.run_id,
        chunk_ids=[passage.chunk_id for passage in passages],
    )
    return _formatted(passages, numbers)


FILE_SEARCH = register(
    BuiltinTool(
        name="file_search",
        group="knowledge",
        description=(
            "Search the documents of this agent's knowledge bases and the files attached to this "
            "conversation. Returns numbered passages with their document and page; cite the ones you "
            "use by number, e.g. [1]."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_QUERY_CHARACTERS,
                    "description": "What to look for, in words the documents would use.",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_LIMIT,
                    "description": f"How many passages to return (default {DEFAULT_LIMIT}).",
                },
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        run=run_file_search,
        is_read_only=True,
        searches_files=True,
    )
)
