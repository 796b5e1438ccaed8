"""The ``files`` group: each agent's workspace, stored as ``WorkspaceFile`` rows.

Nothing here touches the host filesystem. Paths are names inside the workspace: ``/`` at
the start means the workspace root, ``.`` and empty segments are dropped, ``..`` is
refused. Every query is scoped to the run's (tenant, agent).
"""

from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.db.models.functions import Length
from django.utils import timezone

from agents.models import Agent
from files.artifacts import ArtifactSkipped, store_text_artifact
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register
from tools.models import WorkspaceFile

MAX_PATH_LENGTH = 500  # WorkspaceFile.path's max_length
MAX_SEGMENT_LENGTH = 255
DEFAULT_MAX_FILE_BYTES = 1_000_000
DEFAULT_MAX_FILES = 500
READ_MAX_CHARS = 100_000

PATH_PROPERTY = {
    "type": "string",
    "description": "File path inside the workspace, e.g. 'notes/plan.md'.",
    "minLength": 1,
    "maxLength": MAX_PATH_LENGTH,
}


def max_file_bytes() -> int:
    return int(getattr(settings, "WORKSPACE_MAX_FILE_BYTES", DEFAULT_MAX_FILE_BYTES))


def max_files() -> int:
    return int(getattr(settings, "WORKSPACE_MAX_FILES", DEFAULT_MAX_FILES))


def normalize_path(raw: str, *, allow_root: bool = False) -> str:
    """The workspace path ``raw`` names, or ToolError for one that escapes or cannot be stored."""
    if any(ord(character) < 32 or ord(character) == 127 for character in raw):
        raise ToolError("path must not contain control characters")
    if "\\" in raw:
        raise ToolError("use '/' to separate folders in a path")
    segments = [segment for segment in raw.strip().split("/") if segment not in {"", "."}]
    if ".." in segments:
        raise ToolError("'..' is not allowed in a path: paths are relative to the workspace root")
    if not segments and not allow_root:
        raise ToolError("path must name a file")
    if any(len(segment) > MAX_SEGMENT_LENGTH for segment in segments):
        raise ToolError(f"each part of a path must be at most {MAX_SEGMENT_LENGTH} characters")
    path = "/".join(segments)
    if len(path) > MAX_PATH_LENGTH:
        raise ToolError(f"path must be at most {MAX_PATH_LENGTH} characters")
    return path


def agent_id_of(context: ToolContext) -> UUID:
    if context.agent_id is None:
        raise ToolError("workspace files belong to an agent, and this run has none")
    return context.agent_id


def workspace(context: ToolContext) -> QuerySet[WorkspaceFile]:
    return WorkspaceFile.objects.filter(tenant_id=context.tenant_id, agent_id=agent_id_of(context))


def _checked_content(content: str) -> str:
    if "\x00" in content:
        raise ToolError("file content must not contain NUL characters")
    size = len(content.encode("utf-8"))
    if size > max_file_bytes():
        raise ToolError(f"file would be {size} bytes; the limit is {max_file_bytes()} bytes")
    return content


def _missing(path: str) -> ToolError:
    return ToolError(f"{path} does not exist (use file_list to see the workspace)")


# --- file_list ----------------------------------------------------------------------------


def run_file_list(arguments: dict[str, Any], context: ToolContext) -> str:
    folder = normalize_path(arguments.get("folder", ""), allow_root=True)
    files = workspace(context)
    if folder:
        files = files.filter(path__startswith=folder + "/")
    rows = (
        files.annotate(characters=Length("content"))
        .order_by("path")
        .values_list("path", "characters", "updated_at")
    )
    if not rows:
        return f"no files under {folder}/" if folder else "the workspace is empty"
    lines = [f"{len(rows)} file(s):"]
    lines.extend(
        f"{path}  ({characters} characters, updated {updated:%Y-%m-%d %H:%M})"
        for path, characters, updated in rows
    )
    return "\n".join(lines)


register(
    BuiltinTool(
        name="file_list",
        group="files",
        description=(
            "List the files in this agent's workspace (kept across sessions), optionally in one folder."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "folder": {
                    "type": "string",
                    "description": "Only list files under this folder, e.g. 'notes'. All files when omitted.",
                    "maxLength": MAX_PATH_LENGTH,
                },
            },
            "additionalProperties": False,
        },
        run=run_file_list,
        is_read_only=True,
        timeout_seconds=10.0,
    )
)


# --- file_read ----------------------------------------------------------------------------


def run_file_read(arguments: dict[str, Any], context: ToolContext) -> str:
    path = normalize_path(arguments["path"])
    content = workspace(context).filter(path=path).values_list("content", flat=True).first()
    if content is None:
        raise _missing(path)
    if not content:
        return "(empty file)"
    lines = content.splitlines(keepends=True)
    first = int(arguments.get("start_line", 1))
    if first > len(lines):
        raise ToolError(f"start_line {first} is past the end of {path} ({len(lines)} lines)")
    wanted = (
        lines[first - 1 : first - 1 + int(arguments["line_count"])]
        if "line_count" in arguments
        else lines[first - 1 :]
    )
    shown: list[str] = []
    size = 0
    for line in wanted:
        if size + len(line) > READ_MAX_CHARS and shown:
            break
        shown.append(line[:READ_MAX_CHARS])
        size += len(line)
    last = first + len(shown) - 1
    text = "".join(shown)
    if last < len(lines):
        text += (
            f"\n[lines {first}-{last} of {len(lines)}; call file_read with start_line={last + 1} to read on]"
        )
    return text


register(
    BuiltinTool(
        name="file_read",
        group="files",
        description=(
            "Read a file from this agent's workspace. Long files come in parts: pass start_line "
            "(1-based) and line_count to read a range."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": PATH_PROPERTY,
                "start_line": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "First line to read (default 1).",
                },
                "line_count": {"type": "integer", "minimum": 1, "description": "How many lines to read."},
            },
            "required": ["path"],
            "additionalProperties": False,
        },
        run=run_file_read,
        is_read_only=True,
        timeout_seconds=10.0,
    )
)


# --- file_write ---------------------------------------------------------------------------


def run_file_write(arguments: dict[str, Any], context: ToolContext) -> str:
    path = normalize_path(arguments["path"])
    content = _checked_content(arguments["content"])
    summary = _write_workspace_file(context, path, content)
    return f"{summary}; {_kept_as_artifact(context, path, content)}"


def _kept_as_artifact(context: ToolContext, path: str, content: str) -> str:
    """Each write is also a snapshot the chat shows and people can download: the run's artifact.

    The workspace write has happened either way; a snapshot over a limit is only reported.
    """
    try:
        stored = store_text_artifact(context, name=path, text=content)
    except ArtifactSkipped as skipped:
        return f"not kept as a download: {skipped.reason}"
    return f"shown to the user as a download ({stored.name})"


def _write_workspace_file(context: ToolContext, path: str, content: str) -> str:
    files = workspace(context)
    with transaction.atomic():
        # The agent row's lock serializes workspace writes, so concurrent runs cannot
        # both take the last free slot under the file cap.
        if (
            not Agent.objects.select_for_update()
            .filter(pk=agent_id_of(context), tenant_id=context.tenant_id)
            .exists()
        ):
            raise ToolError("this run's agent no longer exists")
        if files.filter(path=path).update(content=content, updated_at=timezone.now()):
            return f"replaced {path} ({len(content.encode('utf-8'))} bytes)"
        if files.count() >= max_files():
            raise ToolError(
                f"the workspace already holds {max_files()} files, the limit; overwrite one instead"
            )
        WorkspaceFile.objects.create(
            tenant_id=context.tenant_id, agent_id=agent_id_of(context), path=path, content=content
        )
    return f"created {path} ({len(content.encode('utf-8'))} bytes)"


register(
    BuiltinTool(
        name="file_write",
        group="files",
        description="Create a file in this agent's workspace, or replace its whole content.",
        input_schema={
            "type": "object",
            "properties": {
                "path": PATH_PROPERTY,
                "content": {"type": "string", "description": "The complete new content of the file."},
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
        run=run_file_write,
        timeout_seconds=10.0,
    )
)


# --- file_edit ----------------------------------------------------------------------------


def run_file_edit(arguments: dict[str, Any], context: ToolContext) -> str:
    path = normalize_path(arguments["path"])
    old_text, new_text = arguments["old_text"], arguments["new_text"]
    if not old_text:
        raise ToolError("old_text must not be empty")
    with transaction.atomic():
        # Locking the row keeps two concurrent edits from each overwriting the other's change.
        file = workspace(context).select_for_update().filter(path=path).first()
        if file is None:
            raise _missing(path)
        occurrences = file.content.count(old_text)
        if occurrences == 0:
            raise ToolError(
                f"old_text was not found in {path}; it must match exactly, including whitespace and newlines"
            )
        if occurrences > 1:
            raise ToolError(
                f"old_text occurs {occurrences} times in {path}; add surrounding text so it matches once"
            )
        file.content = _checked_content(file.content.replace(old_text, new_text, 1))
        file.save(update_fields=["content", "updated_at"])
    return f"edited {path} ({len(file.content.encode('utf-8'))} bytes)"


register(
    BuiltinTool(
        name="file_edit",
        group="files",
        description=(
            "Edit a file in this agent's workspace by replacing one exact piece of text with another. "
            "old_text must occur exactly once in the file."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "path": PATH_PROPERTY,
                "old_text": {"type": "string", "minLength": 1, "description": "The exact text to replace."},
                "new_text": {"type": "string", "description": "The text to put in its place."},
            },
            "required": ["path", "old_text", "new_text"],
            "additionalProperties": False,
        },
        run=run_file_edit,
        timeout_seconds=10.0,
    )
)
