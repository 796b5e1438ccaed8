"""What a sandbox backend promises: run a command in a workspace under limits, stoppable.

Bubblewrap is the one backend today; a container or remote sandbox would implement the
same protocol.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from tools.sandbox.workspaces import WorkspaceFolders

GIB = 1 << 30
MIB = 1 << 20

LimitName = Literal["wall_time", "cpu_time", "memory", "processes", "file_size", "workspace_size"]

LIMIT_DESCRIPTIONS: dict[LimitName, str] = {
    "wall_time": "wall-clock time limit: the sandbox was killed",
    "cpu_time": "CPU time limit: the process was killed",
    "memory": "memory limit: an allocation failed",
    "processes": "process limit: a new process or thread could not be started",
    "file_size": "file size limit: a write past the largest allowed file failed",
    "workspace_size": "workspace size limit: the workspace is full, writes past it fail",
}


@dataclass(frozen=True)
class SandboxLimits:
    cpu_seconds: int = 30
    wall_seconds: float = 60.0
    memory_bytes: int = GIB
    processes: int = 64
    # Per stream (stdout, stderr): the rest is read and dropped.
    output_bytes: int = MIB
    file_bytes: int = 100 * MIB
    workspace_bytes: int = 500 * MIB
    tmp_bytes: int = 64 * MIB


@dataclass(frozen=True)
class SandboxResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    stopped: bool
    limit_hit: LimitName | None
    duration: float
    # The workspace the code left was handed back (in the call's incoming folder); if not, the
    # saved workspace stays as it was before the call.
    is_workspace_returned: bool = False
    # It was over the limit (sparse files, too many entries): what did not fit was left out.
    is_workspace_cut: bool = False


class SandboxBackend(Protocol):
    def is_available(self) -> tuple[bool, str]:
        """(usable, why not): the reason is shown to administrators."""
        ...

    def run(
        self,
        command: list[str],
        *,
        folders: WorkspaceFolders,
        limits: SandboxLimits,
        should_stop: Callable[[], bool],
        run_as_uid: int | None = None,
    ) -> SandboxResult: ...
