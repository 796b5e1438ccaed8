"""The worker reads a sandbox's hand-back as untrusted: never past the limit, never out of its folder."""

import io
import os
import tarfile
from pathlib import Path

import pytest

from tools.sandbox import handback as handback_module
from tools.sandbox.handback import Handback, SandboxStatus, receive_workspace

LIMIT = 1 << 20
STATUS = b"0 0 8192\n"


def archive_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for member, data in members:
            archive.addfile(member, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def file_entry(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    member = tarfile.TarInfo(name)
    member.size = len(data)
    return member, data


def link_entry(name: str, target: str) -> tuple[tarfile.TarInfo, bytes]:
    member = tarfile.TarInfo(name)
    member.type = tarfile.SYMTYPE
    member.linkname = target
    return member, b""


def receive(tmp_path: Path, stream: bytes) -> tuple[Handback, Path]:
    destination = tmp_path / "incoming"
    destination.mkdir()
    return receive_workspace(io.BytesIO(stream), destination, limit_bytes=LIMIT), destination


def files_under(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_a_workspace_within_the_limit_is_received_whole(tmp_path: Path) -> None:
    stream = STATUS + archive_of(file_entry("notes/a.txt", b"hello"), link_entry("latest", "notes/a.txt"))

    handback, destination = receive(tmp_path, stream)

    assert handback == Handback(
        status=SandboxStatus(exit_code=0, is_timed_out=False, used_bytes=8192), is_complete=True
    )
    assert files_under(destination) == ["latest", "notes", "notes/a.txt"]
    assert (destination / "latest").read_text() == "hello"


def test_entries_past_the_limit_are_never_written(tmp_path: Path) -> None:
    """Sparse files declare more than the sandbox's tmpfs held: the worker counts what it writes."""
    stream = STATUS + archive_of(
        file_entry("first.bin", bytes(LIMIT // 2)),
        file_entry("second.bin", bytes(LIMIT // 2 + 1)),
        file_entry("third.txt", b"x"),
    )

    handback, destination = receive(tmp_path, stream)

    assert (handback.is_complete, handback.is_cut) == (True, True)
    assert files_under(destination) == ["first.bin"]


def test_more_entries_than_allowed_are_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handback_module, "MAX_ENTRIES", 20)
    stream = STATUS + archive_of(*[file_entry(f"f{number:02d}", b"") for number in range(25)])

    handback, destination = receive(tmp_path, stream)

    assert handback.is_cut
    assert sorted(os.listdir(destination)) == [f"f{number:02d}" for number in range(20)]


@pytest.mark.parametrize(
    ("entry", "received"),
    [
        (file_entry("../escaped.txt", b"out"), ["kept.txt"]),
        # tarfile's data filter takes the leading slash off: it lands inside.
        (file_entry("/etc/escaped.txt", b"out"), ["etc", "etc/escaped.txt", "kept.txt"]),
        (link_entry("passwd", "/etc/passwd"), ["kept.txt"]),
        (link_entry("up", "../../.."), ["kept.txt"]),
    ],
)
def test_nothing_leads_out_of_the_folder(
    tmp_path: Path, entry: tuple[tarfile.TarInfo, bytes], received: list[str]
) -> None:
    stream = STATUS + archive_of(entry, file_entry("kept.txt", b"ok"))

    handback, destination = receive(tmp_path, stream)

    assert handback.is_complete
    assert files_under(destination) == received
    assert files_under(tmp_path) == ["incoming"] + [f"incoming/{name}" for name in received]


def test_a_stream_cut_off_mid_way_is_not_complete(tmp_path: Path) -> None:
    whole = archive_of(file_entry("big.bin", bytes(100_000)))

    handback, _destination = receive(tmp_path, STATUS + whole[:50_000])

    assert handback.status == SandboxStatus(exit_code=0, is_timed_out=False, used_bytes=8192)
    assert not handback.is_complete


@pytest.mark.parametrize("stream", [b"", b"not a status\n", b"1 2\n"])
def test_no_status_line_means_nothing_was_handed_back(tmp_path: Path, stream: bytes) -> None:
    handback, destination = receive(tmp_path, stream)

    assert handback == Handback()
    assert files_under(destination) == []
