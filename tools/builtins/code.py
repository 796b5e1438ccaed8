"""The ``code`` group: ``code_run`` executes Python or a shell script in the session's sandbox.

Hidden where the sandbox cannot run (no bubblewrap, or the sandbox Python not built); the
reason is shown on the tool's admin page.
"""

import threading
import uuid
from typing import Any, Literal
from uuid import UUID
from weakref import WeakValueDictionary

from django.conf import settings

from files.models import FilePurpose, FileStatus, StoredFile
from tools.builtins.base import BuiltinTool, ToolContext, ToolError, register
from tools.sandbox.base import LIMIT_DESCRIPTIONS, SandboxLimits, SandboxResult
from tools.sandbox.bubblewrap import HANDBACK_SECONDS, BubblewrapBackend
from tools.sandbox.environment import (
    closed_folder_reason,
    sandbox_python,
    sandbox_python_dir,
    sandbox_python_status,
)
from tools.sandbox.outputs import collect_outputs, hand_over_outputs
from tools.sandbox.workspaces import (
    OUTPUT_FOLDER,
    WorkspaceFolders,
    discard_incoming,
    keep_incoming,
    place_attachments,
    prepare_workspace,
    sandbox_root,
    sandbox_uid_for,
    workspace_size,
    write_code_file,
)

MAX_CODE_CHARS = 100_000
# Beyond the sandbox's own wall limit and its hand-back: the loop's timeout is only a backstop.
TIMEOUT_MARGIN_SECONDS = HANDBACK_SECONDS + 10.0

Language = Literal["python", "shell"]

# Calls of one session take turns on this worker: they share output/ and .code/.
_session_locks: "WeakValueDictionary[UUID, threading.Lock]" = WeakValueDictionary()
_session_locks_guard = threading.Lock()


def configured_limits() -> SandboxLimits:
    return SandboxLimits(
        cpu_seconds=int(settings.SANDBOX_CPU_SECONDS),
        wall_seconds=float(settings.SANDBOX_WALL_SECONDS),
        memory_bytes=int(settings.SANDBOX_MEMORY_BYTES),
        processes=int(settings.SANDBOX_PROCESSES),
        output_bytes=int(settings.SANDBOX_OUTPUT_BYTES),
        file_bytes=int(settings.SANDBOX_FILE_BYTES),
        workspace_bytes=int(settings.SANDBOX_WORKSPACE_BYTES),
        tmp_bytes=int(settings.SANDBOX_TMP_BYTES),
    )


def sandbox_backend() -> BubblewrapBackend:
    return BubblewrapBackend(sandbox_python_dir())


def code_run_unavailable_reason() -> str:
    """Empty when code_run can run here; otherwise what an operator must fix."""
    is_usable, reason = sandbox_backend().is_available()
    if not is_usable:
        return reason
    is_built, reason = sandbox_python_status()
    if not is_built:
        return reason
    return closed_folder_reason([sandbox_python_dir(), sandbox_root()])


def session_lock(session_id: UUID) -> threading.Lock:
    with _session_locks_guard:
        lock = _session_locks.get(session_id)
        if lock is None:
            lock = _session_locks[session_id] = threading.Lock()
        return lock


def command_for(language: Language, code_path: str) -> list[str]:
    if language == "python":
        return [str(sandbox_python()), code_path]
    return ["/bin/sh", code_path]


def run_code_run(arguments: dict[str, Any], context: ToolContext) -> str:
    reason = code_run_unavailable_reason()
    if reason:
        raise ToolError(f"code execution is unavailable: {reason}")
    language: Language = arguments["language"]
    limits = configured_limits()
    uid = sandbox_uid_for(context.session_id)
    with session_lock(context.session_id):
        folders = prepare_workspace(context.tenant_id, context.session_id)
        refuse_when_over_limit(folders, limits)
        place_attachments(folders, session_attachments(context), uid)
        suffix = ".py" if language == "python" else ".sh"
        code_path = write_code_file(folders, f"{uuid.uuid4().hex}{suffix}", arguments["code"], uid)
        result = sandbox_backend().run(
            command_for(language, code_path),
            folders=folders,
            limits=limits,
            should_stop=context.should_stop,
            run_as_uid=uid,
        )
        if result.stopped:
            discard_incoming(folders)
            raise ToolError("stopped: the run was cancelled and the sandbox killed")
        if not result.is_workspace_returned:
            discard_incoming(folders)
            return result_text(result, [], limits=limits)
        keep_incoming(folders, uid)
        outputs = collect_outputs(folders.saved / OUTPUT_FOLDER)
        # Before the lock is let go: the session's next call empties output/.
        artifacts = hand_over_outputs(context, outputs)
    return result_text(result, artifacts, limits=limits)


def refuse_when_over_limit(folders: WorkspaceFolders, limits: SandboxLimits) -> None:
    """A workspace saved before the limit was enforced, or above a lowered one, cannot be copied in."""
    used_bytes = workspace_size(folders.saved)
    if used_bytes > limits.workspace_bytes:
        raise ToolError(
            f"refused: this conversation's workspace holds {used_bytes:,} bytes, over its limit of "
            f"{limits.workspace_bytes:,} bytes, so no code can run in it. Start a new conversation "
            "to run code; deleting this one frees its workspace."
        )


def session_attachments(context: ToolContext) -> list[tuple[str, bytes]]:
    """The files people attached to this conversation, as the code reads them in attachments/."""
    attached = StoredFile.objects.filter(
        tenant_id=context.tenant_id, session_id=context.session_id, purpose=FilePurpose.ATTACHMENT
    ).exclude(status=FileStatus.FAILED)
    files: list[tuple[str, bytes]] = []
    for stored in attached.order_by("created_at", "id").defer("text"):
        with stored.blob.open("rb") as blob:
            files.append((stored.name, blob.read()))
    return files


def result_text(result: SandboxResult, artifacts: list[dict[str, Any]], *, limits: SandboxLimits) -> str:
    lines = [f"exit code: {result.exit_code}"]
    if result.limit_hit is not None:
        lines.append(f"limit hit: {LIMIT_DESCRIPTIONS[result.limit_hit]}{limit_value(result, limits)}")
    if result.is_workspace_cut:
        lines.append("the workspace was over its limit when the code ended: files past it were not kept")
    if not result.is_workspace_returned:
        lines.append(
            "the workspace was not handed back (the sandbox ended early): it is as it was before this call"
        )
    lines += ["", "stdout:", result.stdout.rstrip("\n") or "(empty)", "", "stderr:"]
    lines.append(result.stderr.rstrip("\n") or "(empty)")
    if artifacts:
        lines += ["", f"files in {OUTPUT_FOLDER}/ (shown to the user with download links):"]
        lines += [artifact_line(artifact) for artifact in artifacts]
    return "\n".join(lines)


def artifact_line(artifact: dict[str, Any]) -> str:
    if "skipped" in artifact:
        return f"- {artifact['name']}: not kept ({artifact['skipped']})"
    return f"- {artifact['name']} ({artifact['content_type']}, {artifact['size']:,} bytes)"


def limit_value(result: SandboxResult, limits: SandboxLimits) -> str:
    values = {
        "wall_time": f" ({limits.wall_seconds:g} s)",
        "cpu_time": f" ({limits.cpu_seconds} s of CPU)",
        "memory": f" ({limits.memory_bytes:,} bytes of address space)",
        "processes": f" ({limits.processes} processes and threads)",
        "file_size": f" ({limits.file_bytes:,} bytes per file)",
        "workspace_size": f" ({limits.workspace_bytes:,} bytes); delete files to free space",
    }
    return values.get(result.limit_hit or "", "")


CODE_RUN_DESCRIPTION = (
    "Run Python 3 or a POSIX shell script in a sandbox with no network. The working folder "
    "/workspace is kept between calls of this conversation, with the files earlier calls wrote; "
    "files people attached to the conversation are in /workspace/attachments/ (read-only). "
    "Write files to hand back to /workspace/output/ (emptied at each call). Python has numpy, "
    "pandas and matplotlib (save charts with plt.savefig('output/chart.png')). Returns the exit "
    "code, stdout, stderr and the files written to output/. The workspace has a size limit: "
    "writes past it fail with 'No space left on device'."
)


register(
    BuiltinTool(
        name="code_run",
        group="code",
        description=CODE_RUN_DESCRIPTION,
        input_schema={
            "type": "object",
            "properties": {
                "language": {"type": "string", "enum": ["python", "shell"]},
                "code": {"type": "string", "minLength": 1, "maxLength": MAX_CODE_CHARS},
            },
            "required": ["language", "code"],
            "additionalProperties": False,
        },
        run=run_code_run,
        timeout_seconds=float(getattr(settings, "SANDBOX_WALL_SECONDS", 60.0)) + TIMEOUT_MARGIN_SECONDS,
        is_available=lambda: not code_run_unavailable_reason(),
        unavailable_reason=code_run_unavailable_reason,
    )
)
