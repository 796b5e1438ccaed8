"""The bubblewrap backend: a fresh set of namespaces per run, under resource limits.

The command chain is ``prlimit … -- [setpriv …] -- bwrap … -- <command>``: prlimit sets the
limits, setpriv (only when the worker runs as root) drops to an unprivileged uid before
bwrap, because root ignores RLIMIT_NPROC; bwrap then builds the view: no network (a fresh
network namespace with only loopback), a read-only /usr, a tiny /etc, a private /tmp and
/proc, the sandbox Python read-only at its real path, and /workspace: a tmpfs the size of the
workspace limit, into which the supervisor (``tools/sandbox/supervisor.py``, the sandbox's first
process) copies the saved workspace, and from which it hands the workspace back through a pipe
when the code has ended. No host folder is writable inside. Nothing is inherited from the
worker's environment.
"""

import contextlib
import os
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from tools.sandbox.base import LimitName, SandboxLimits, SandboxResult
from tools.sandbox.handback import Handback, receive_workspace
from tools.sandbox.workspaces import ATTACHMENTS_FOLDER, CODE_FOLDER, WorkspaceFolders

BWRAP = Path("/usr/bin/bwrap")
PRLIMIT = Path("/usr/bin/prlimit")
SETPRIV = Path("/usr/bin/setpriv")
WORKSPACE_MOUNT = "/workspace"
SUPERVISOR = Path(__file__).with_name("supervisor.py")
SUPERVISOR_MOUNT = "/run/sandbox/supervisor.py"
SAVED_WORKSPACE_MOUNT = "/run/sandbox/saved"
# Past the wall limit, for copying the workspace in and handing it back; then the worker kills.
HANDBACK_SECONDS = 20.0
# A workspace with less free than this at the end counts as full (writes into it failed).
FULL_MARGIN_BYTES = 64 << 10
# The receiving thread ends when the sandbox does; this only guards against a bug.
RECEIVER_JOIN_SECONDS = 30.0
# How often a running sandbox checks for a cancel (the brief: within 2 s; this is far under).
POLL_SECONDS = 0.1
READ_CHUNK_BYTES = 65536
# Readers end when every process of the sandbox is gone; this only guards against a bug.
READER_JOIN_SECONDS = 2.0
TRUNCATION_NOTE = "\n[output truncated]"
TOP_LEVEL_SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Only what dynamic linking, time zones and Debian's alternatives need: no passwd, no shadow.
# fonts: matplotlib asks fontconfig, which complains on stderr without its configuration.
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "fonts")

MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "Unable to allocate")
PROCESS_MARKERS = ("Resource temporarily unavailable", "Cannot fork", "can't start new thread")
FILE_SIZE_MARKERS = ("File too large", "File size limit exceeded")


def is_root() -> bool:
    return os.geteuid() == 0


def missing_programs() -> list[str]:
    needed = [BWRAP, PRLIMIT] + ([SETPRIV] if is_root() else [])
    return [str(program) for program in needed if not os.access(program, os.X_OK)]


@lru_cache(maxsize=1)
def bubblewrap_works() -> tuple[bool, str]:
    """Once per process: can this host create the namespaces (user namespaces allowed)?"""
    missing = missing_programs()
    if missing:
        return False, f"not installed: {', '.join(missing)} (install Debian's bubblewrap and util-linux)"
    probe = [str(BWRAP), "--unshare-all", "--ro-bind", "/usr", "/usr", *system_dir_arguments(), "/bin/true"]
    if is_root():
        probe = [str(SETPRIV), "--reuid=65534", "--regid=65534", "--clear-groups", "--", *probe]
    try:
        completed = subprocess.run(probe, capture_output=True, timeout=10, env={})
    except (OSError, subprocess.TimeoutExpired) as error:
        return False, f"bubblewrap could not start: {error}"
    if completed.returncode != 0:
        reason = completed.stderr.decode(errors="replace").strip() or f"exit code {completed.returncode}"
        return False, f"bubblewrap cannot create a sandbox here (user namespaces disabled?): {reason}"
    return True, ""


def system_dir_arguments() -> list[str]:
    """/bin, /lib… as on the host: symlinks into /usr on merged-/usr systems, else read-only binds."""
    arguments: list[str] = []
    for name in TOP_LEVEL_SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            arguments += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            arguments += ["--ro-bind", str(path), str(path)]
    return arguments


def etc_arguments() -> list[str]:
    arguments: list[str] = []
    for name in ETC_ENTRIES:
        arguments += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return arguments


def sandbox_environment(python_dir: Path) -> dict[str, str]:
    return {
        "PATH": f"{python_dir}/bin:/usr/local/bin:/usr/bin:/bin",
        "HOME": WORKSPACE_MOUNT,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        "MPLBACKEND": "Agg",
        "MPLCONFIGDIR": "/tmp",
        "PYTHONDONTWRITEBYTECODE": "1",
        # Each thread counts against the process limit; numerical libraries start one per core.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
    }


def tasks_of_uid(uid: int) -> int:
    """Processes and threads the uid runs now: RLIMIT_NPROC counts them all, the worker's too."""
    count = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue  # the process ended while we looked
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        if int(fields.get("Uid", "-1").split()[0]) == uid:
            count += int(fields.get("Threads", "1"))
    return count


def limit_hit_for(
    exit_code: int, stderr: str, *, timed_out: bool, is_workspace_full: bool
) -> LimitName | None:
    """Which limit ended the run, from the signal (128 + signal), the error text or the workspace."""
    if timed_out:
        return "wall_time"
    if exit_code in (128 + signal.SIGXCPU, -signal.SIGXCPU):
        return "cpu_time"
    tail = stderr[-4000:]
    if exit_code in (128 + signal.SIGXFSZ, -signal.SIGXFSZ) or any(m in tail for m in FILE_SIZE_MARKERS):
        return "file_size"
    if is_workspace_full:
        return "workspace_size"
    if exit_code != 0 and any(marker in tail for marker in MEMORY_MARKERS):
        return "memory"
    if any(marker in tail for marker in PROCESS_MARKERS):
        return "processes"
    return None


@dataclass
class BoundedReader:
    """Reads a pipe to its end, keeping the first ``limit`` bytes and dropping the rest."""

    stream: int
    limit: int
    kept: bytearray = field(default_factory=bytearray)
    is_truncated: bool = False

    def read_all(self) -> None:
        while chunk := os.read(self.stream, READ_CHUNK_BYTES):
            room = self.limit - len(self.kept)
            if len(chunk) > room:
                self.is_truncated = True
            if room > 0:
                self.kept += chunk[:room]
        os.close(self.stream)

    def text(self) -> str:
        text = self.kept.decode("utf-8", errors="replace")
        return text + TRUNCATION_NOTE if self.is_truncated else text


@lru_cache(maxsize=1)
def supervisor_source() -> bytes:
    return SUPERVISOR.read_bytes()


@dataclass
class WorkspaceReceiver:
    """Reads the sandbox's hand-back channel on its own thread while the sandbox runs."""

    channel: int
    destination: Path
    limit_bytes: int
    handback: Handback = field(default_factory=Handback)

    def receive(self) -> None:
        with os.fdopen(self.channel, "rb") as stream:
            self.handback = receive_workspace(stream, self.destination, limit_bytes=self.limit_bytes)


class BubblewrapBackend:
    def __init__(self, python_dir: Path) -> None:
        self.python_dir = python_dir

    def is_available(self) -> tuple[bool, str]:
        return bubblewrap_works()

    def command_for(
        self,
        command: list[str],
        *,
        folders: WorkspaceFolders,
        limits: SandboxLimits,
        run_as_uid: int | None,
        channel_fd: int,
        supervisor_fd: int,
    ) -> list[str]:
        supervised = [
            str(self.python_dir / "bin" / "python"),
            SUPERVISOR_MOUNT,
            str(channel_fd),
            str(limits.wall_seconds),
            "--",
            *command,
        ]
        return [
            *self._limit_prefix(limits),
            *self._privilege_drop_prefix(run_as_uid),
            str(BWRAP),
            *self._bwrap_arguments(folders, limits, supervisor_fd),
            "--",
            *supervised,
        ]

    def run(
        self,
        command: list[str],
        *,
        folders: WorkspaceFolders,
        limits: SandboxLimits,
        should_stop: Callable[[], bool],
        run_as_uid: int | None = None,
    ) -> SandboxResult:
        started = time.monotonic()
        stdout_read, stdout_write = os.pipe()
        stderr_read, stderr_write = os.pipe()
        channel_read, channel_write = os.pipe()
        supervisor_read, supervisor_write = os.pipe()
        # Far smaller than a pipe's buffer: written whole before bwrap reads it.
        os.write(supervisor_write, supervisor_source())
        os.close(supervisor_write)
        full_command = self.command_for(
            command,
            folders=folders,
            limits=limits,
            run_as_uid=run_as_uid,
            channel_fd=channel_write,
            supervisor_fd=supervisor_read,
        )
        try:
            # A new session makes the whole chain one process group, killed together on stop.
            process = subprocess.Popen(
                full_command,
                stdin=subprocess.DEVNULL,
                stdout=stdout_write,
                stderr=stderr_write,
                env={},
                start_new_session=True,
                pass_fds=(channel_write, supervisor_read),
            )
        finally:
            for descriptor in (stdout_write, stderr_write, channel_write, supervisor_read):
                os.close(descriptor)
        readers = [
            BoundedReader(stdout_read, limits.output_bytes),
            BoundedReader(stderr_read, limits.output_bytes),
        ]
        receiver = WorkspaceReceiver(channel_read, folders.incoming, limits.workspace_bytes)
        threads = [threading.Thread(target=reader.read_all, daemon=True) for reader in readers]
        receiving = threading.Thread(target=receiver.receive, daemon=True)
        for thread in [*threads, receiving]:
            thread.start()
        exit_code, timed_out, stopped = wait_or_kill(
            process, limits.wall_seconds + HANDBACK_SECONDS, should_stop
        )
        for thread in threads:
            thread.join(READER_JOIN_SECONDS)
        receiving.join(RECEIVER_JOIN_SECONDS)
        return self._result(
            exit_code=exit_code,
            timed_out=timed_out,
            stopped=stopped,
            stdout=readers[0].text(),
            stderr=readers[1].text(),
            handback=receiver.handback,
            limits=limits,
            duration=time.monotonic() - started,
        )

    def _result(
        self,
        *,
        exit_code: int,
        timed_out: bool,
        stopped: bool,
        stdout: str,
        stderr: str,
        handback: Handback,
        limits: SandboxLimits,
        duration: float,
    ) -> SandboxResult:
        """The supervisor's report of the code when it made one; else what the worker saw."""
        status = handback.status
        if status is not None:
            exit_code, timed_out = status.exit_code, status.is_timed_out
        is_full = handback.is_cut or (
            status is not None and status.used_bytes + FULL_MARGIN_BYTES > limits.workspace_bytes
        )
        return SandboxResult(
            exit_code=exit_code,
            stdout=stdout,
            stderr=stderr,
            timed_out=timed_out,
            stopped=stopped,
            limit_hit=None
            if stopped
            else limit_hit_for(exit_code, stderr, timed_out=timed_out, is_workspace_full=is_full),
            duration=duration,
            is_workspace_returned=handback.is_complete and not stopped,
            is_workspace_cut=handback.is_cut,
        )

    def _limit_prefix(self, limits: SandboxLimits) -> list[str]:
        # Unprivileged, the uid's other tasks (the worker's threads) count against the limit too.
        processes = limits.processes if is_root() else limits.processes + tasks_of_uid(os.getuid())
        return [
            str(PRLIMIT),
            # SIGXCPU at the soft limit, SIGKILL a second later for code that ignores it.
            f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
            f"--as={limits.memory_bytes}",
            f"--nproc={processes}",
            f"--fsize={limits.file_bytes}",
            "--core=0",
            "--",
        ]

    def _privilege_drop_prefix(self, run_as_uid: int | None) -> list[str]:
        if not is_root():
            return []
        if run_as_uid is None or run_as_uid == 0:
            raise ValueError("running as root, the sandbox needs an unprivileged uid to run as")
        return [
            str(SETPRIV),
            f"--reuid={run_as_uid}",
            f"--regid={run_as_uid}",
            "--clear-groups",
            "--no-new-privs",
            "--",
        ]

    def _bwrap_arguments(
        self, folders: WorkspaceFolders, limits: SandboxLimits, supervisor_fd: int
    ) -> list[str]:
        environment = [
            argument
            for name, value in sandbox_environment(self.python_dir).items()
            for argument in ("--setenv", name, value)
        ]
        return [
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
            "--clearenv",
            *environment,
            "--ro-bind",
            "/usr",
            "/usr",
            *system_dir_arguments(),
            *etc_arguments(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(limits.tmp_bytes),
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            str(self.python_dir),
            str(self.python_dir),
            "--ro-bind-data",
            str(supervisor_fd),
            SUPERVISOR_MOUNT,
            "--ro-bind",
            str(folders.saved),
            SAVED_WORKSPACE_MOUNT,
            *self._workspace_arguments(folders, limits),
            "--chdir",
            WORKSPACE_MOUNT,
        ]

    def _workspace_arguments(self, folders: WorkspaceFolders, limits: SandboxLimits) -> list[str]:
        """The size-capped tmpfs, with the call's inputs bound read-only inside it."""
        return [
            "--size",
            str(limits.workspace_bytes),
            "--tmpfs",
            WORKSPACE_MOUNT,
            "--ro-bind",
            str(folders.code),
            f"{WORKSPACE_MOUNT}/{CODE_FOLDER}",
            "--ro-bind",
            str(folders.attachments),
            f"{WORKSPACE_MOUNT}/{ATTACHMENTS_FOLDER}",
        ]


def wait_or_kill(
    process: subprocess.Popen[bytes], wall_seconds: float, should_stop: Callable[[], bool]
) -> tuple[int, bool, bool]:
    """(exit code, timed out, stopped): polls the stop signal so a cancel ends the sandbox quickly.

    Waits on a pidfd, which wakes the moment the process ends (Popen.wait's timeout polls with
    sleeps of up to 50 ms, a visible share of a short run).
    """
    deadline = time.monotonic() + wall_seconds
    pidfd = os.pidfd_open(process.pid)
    try:
        while True:
            has_ended, _, _ = select.select([pidfd], [], [], POLL_SECONDS)
            if has_ended:
                return process.wait(), False, False
            stopped = should_stop()
            timed_out = not stopped and time.monotonic() >= deadline
            if stopped or timed_out:
                kill_process_group(process)
                return process.wait(), timed_out, stopped
    finally:
        os.close(pidfd)


def kill_process_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL bwrap's group; bwrap's init dies with it (--die-with-parent), taking the pid namespace."""
    with contextlib.suppress(ProcessLookupError):  # it ended on its own a moment ago
        os.killpg(process.pid, signal.SIGKILL)
