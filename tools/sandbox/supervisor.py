"""The sandbox's first process: the workspace in, the code under its wall limit, the workspace out.

Run inside the sandbox by its Python as ``supervisor.py CHANNEL_FD WALL_SECONDS -- COMMAND…``.
/workspace is a tmpfs the size of the workspace limit, so a write past the limit fails there
and never reaches the host's disk. This copies the saved workspace (bound read-only at
``SAVED``) in, runs the command, ends every process it left, then writes to the channel one
line ``exit_code timed_out used_bytes`` and a tar of /workspace, which the worker reads within
the limit. Standard library only: it runs on the sandbox's Python, not the worker's.
"""

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from typing import BinaryIO

WORKSPACE = "/workspace"
SAVED = "/run/sandbox/saved"
# Bound read-only for each call by the worker: neither copied in nor handed back.
INPUT_FOLDERS = (".code", "attachments")
COPY_IN_FAILED = 125
PR_SET_DUMPABLE = 4
END_ATTEMPTS = 200
END_PAUSE_SECONDS = 0.005


def main(arguments: list[str]) -> int:
    channel_fd, wall_seconds, command = int(arguments[1]), float(arguments[2]), arguments[4:]
    # Not dumpable: the code (same uid) can neither trace this process nor open its channel
    # through /proc, so the exit status it reports is the command's own.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    try:
        copy_in()
    except (OSError, shutil.Error) as error:
        print(f"the saved workspace could not be copied in: {error}", file=sys.stderr)
        return COPY_IN_FAILED
    exit_code, is_timed_out = run(command, wall_seconds)
    end_other_processes()
    try:
        with os.fdopen(channel_fd, "wb") as channel:
            channel.write(f"{exit_code} {int(is_timed_out)} {used_bytes()}\n".encode())
            hand_back(channel)
    except BrokenPipeError:
        pass  # the worker stopped reading: what followed was past the limit
    return 0


def copy_in() -> None:
    for entry in os.scandir(SAVED):
        if entry.name in INPUT_FOLDERS:
            continue
        target = os.path.join(WORKSPACE, entry.name)
        if entry.is_dir(follow_symlinks=False):
            shutil.copytree(entry.path, target, symlinks=True)
        else:
            shutil.copy2(entry.path, target, follow_symlinks=False)


def run(command: list[str], wall_seconds: float) -> tuple[int, bool]:
    """(exit code, timed out); a signal's death reads 128 + signal, as shells report it."""
    child = subprocess.Popen(command)  # noqa: S603 - the sandboxed code, run as it asked
    try:
        return_code = child.wait(timeout=wall_seconds)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        return -signal.SIGKILL, True
    return (return_code if return_code >= 0 else 128 - return_code), False


def end_other_processes() -> None:
    """SIGKILL everything the code left (all but this process and the namespace's init)."""
    for _attempt in range(END_ATTEMPTS):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return  # nothing left to signal
        time.sleep(END_PAUSE_SECONDS)


def used_bytes() -> int:
    usage = os.statvfs(WORKSPACE)
    return (usage.f_blocks - usage.f_bfree) * usage.f_frsize


def hand_back(channel: BinaryIO) -> None:
    with tarfile.open(fileobj=channel, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        for folder, folders, files in os.walk(WORKSPACE):
            if folder == WORKSPACE:
                folders[:] = [name for name in folders if name not in INPUT_FOLDERS]
                files = [name for name in files if name not in INPUT_FOLDERS]
            for name in sorted(folders) + sorted(files):
                add_entry(archive, os.path.join(folder, name))


def add_entry(archive: tarfile.TarFile, path: str) -> None:
    name = os.path.relpath(path, WORKSPACE)
    try:
        entry = archive.gettarinfo(path, arcname=name)
        if entry is None:
            return  # a socket: nothing to keep
        if entry.issym() and os.path.isabs(entry.linkname):
            # The worker keeps only links that stay inside the workspace, written relative.
            if os.path.commonpath([entry.linkname, WORKSPACE]) != WORKSPACE:
                print(f"not kept: {name}: a link out of /workspace", file=sys.stderr)
                return
            entry.linkname = os.path.relpath(entry.linkname, os.path.dirname(path))
        if entry.isreg():
            with open(path, "rb") as file:
                archive.addfile(entry, file)
        else:
            archive.addfile(entry)
    except OSError as error:
        print(f"not kept: {name}: {error.strerror}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
