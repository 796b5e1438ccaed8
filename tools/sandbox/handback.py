"""The worker's side of the hand-back: the sandbox's status line and its workspace, read within the limit.

What arrives is written by code the tenant controls, so it is read as untrusted: at most the
workspace limit of file data (counted in whole pages, as the sandbox's tmpfs counts it), at
most ``MAX_ENTRIES`` entries, and only what tarfile's ``data`` filter lets through (no
absolute paths, no links out of the folder, no device files). Nothing past the limit is ever
written to the host's disk.
"""

import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

PAGE_BYTES = 4096
# Files, folders and links a workspace may hold: each costs the host an inode, even when empty.
MAX_ENTRIES = 50_000
# A tar header, and a PAX header for a long name, per entry.
HEADER_ALLOWANCE_BYTES = 1536
MAX_STATUS_CHARS = 100


class StreamTooLarge(Exception):
    """The sandbox sent more than any workspace within the limit could take."""


@dataclass(frozen=True)
class SandboxStatus:
    exit_code: int
    is_timed_out: bool
    used_bytes: int


@dataclass
class Handback:
    status: SandboxStatus | None = None
    # The whole archive was read, or read up to the limit: the folder holds what the code left.
    is_complete: bool = False
    # The workspace the code left was over the limit: entries past it were not kept.
    is_cut: bool = False


class CappedReader:
    """Reads from ``stream`` until ``cap`` bytes, then raises: tarfile buffers headers whole."""

    def __init__(self, stream: BinaryIO, cap: int) -> None:
        self.stream = stream
        self.remaining = cap

    def read(self, size: int = -1) -> bytes:
        if self.remaining <= 0:
            raise StreamTooLarge
        wanted = self.remaining if size < 0 else min(size, self.remaining)
        data = self.stream.read(wanted)
        self.remaining -= len(data)
        return data


def receive_workspace(stream: BinaryIO, destination: Path, *, limit_bytes: int) -> Handback:
    """Reads the status line, then extracts the workspace into ``destination`` (an empty folder)."""
    handback = Handback(status=parse_status(stream.readline(MAX_STATUS_CHARS)))
    if handback.status is None:
        return handback  # the sandbox ended before it handed anything back
    cap = limit_bytes + MAX_ENTRIES * HEADER_ALLOWANCE_BYTES + tarfile.RECORDSIZE
    try:
        with tarfile.open(fileobj=CappedReader(stream, cap), mode="r|") as archive:  # type: ignore[call-overload]
            handback.is_cut = extract_within(archive, destination, limit_bytes=limit_bytes)
    except StreamTooLarge:
        handback.is_cut = True
    except (tarfile.TarError, EOFError):
        return handback  # cut off mid-way: the sandbox was killed while handing back
    handback.is_complete = True
    return handback


def extract_within(archive: tarfile.TarFile, destination: Path, *, limit_bytes: int) -> bool:
    """Extracts entries in order until the limit; True when some did not fit."""
    kept_bytes = 0
    for count, member in enumerate(archive, start=1):
        kept_bytes += pages_of(member)
        if kept_bytes > limit_bytes or count > MAX_ENTRIES:
            return True
        try:
            archive.extract(member, destination, filter=keep_as_data)
        except (tarfile.TarError, OSError):
            continue  # refused by the filter, or not extractable here: left out
    return False


def pages_of(member: tarfile.TarInfo) -> int:
    if not member.isreg():
        return 0
    return -(-member.size // PAGE_BYTES) * PAGE_BYTES


def keep_as_data(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
    """tarfile's ``data`` filter, and folders the owner may always enter and write."""
    kept = tarfile.data_filter(member, destination)
    if kept.isdir():
        return kept.replace(mode=0o755, deep=False)
    return kept


def parse_status(line: bytes) -> SandboxStatus | None:
    try:
        exit_code, timed_out, used_bytes = (int(part) for part in line.split())
    except ValueError:
        return None
    return SandboxStatus(exit_code=exit_code, is_timed_out=timed_out == 1, used_bytes=used_bytes)
