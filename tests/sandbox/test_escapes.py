"""Each way out of the sandbox, tried from inside: network, other folders, the server's secrets."""

import os
import shutil
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.conftest import make_context, run_python, run_shell, stdout_of
from tools.builtins.base import ToolContext
from tools.sandbox.workspaces import folders_for, session_workspace_path

CONNECT_CODE = """
import socket
try:
    socket.create_connection(({host!r}, {port}), timeout=3)
    print("connected")
except OSError as error:
    print("failed:", error)
"""

READ_CODE = """
try:
    print(open({path!r}).read())
except OSError as error:
    print("failed:", type(error).__name__)
"""


@pytest.fixture
def host_server() -> Iterator[tuple[int, list[object]]]:
    """A TCP server on the host's loopback that records every connection it accepts."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[object] = []

    def accept() -> None:
        while True:
            try:
                connection, address = listener.accept()
            except OSError:
                return
            accepted.append(address)
            connection.close()

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1], accepted
    listener.close()


def test_print_one_works(context: ToolContext) -> None:
    result = run_python("print(1)", context)

    assert result.startswith("exit code: 0\n")
    assert stdout_of(result) == "1"


def test_the_hosts_loopback_server_is_unreachable(
    context: ToolContext, host_server: tuple[int, list[object]]
) -> None:
    port, accepted = host_server

    result = run_python(CONNECT_CODE.format(host="127.0.0.1", port=port), context)

    assert stdout_of(result) == "failed: [Errno 111] Connection refused"
    assert accepted == []


def test_a_public_address_is_unreachable(context: ToolContext) -> None:
    result = run_python(CONNECT_CODE.format(host="1.1.1.1", port=53), context)

    assert stdout_of(result) == "failed: [Errno 101] Network is unreachable"


def test_names_do_not_resolve(context: ToolContext) -> None:
    code = "import socket\ntry:\n    socket.getaddrinfo('example.com', 80)\nexcept OSError:\n    print('no')"

    result = run_python(code, context)

    assert stdout_of(result) == "no"


def test_another_sessions_workspace_is_out_of_reach(context: ToolContext) -> None:
    neighbour = make_context(tenant_id=context.tenant_id)
    run_shell("echo neighbour-secret > notes.txt", neighbour)
    neighbour_file = session_workspace_path(neighbour.tenant_id, neighbour.session_id) / "notes.txt"

    result = run_python(READ_CODE.format(path=str(neighbour_file)), context)
    listing = run_shell("ls -A /workspace", context)

    assert neighbour_file.read_text() == "neighbour-secret\n"
    assert stdout_of(result) == "failed: FileNotFoundError"
    assert stdout_of(listing) == ".code\nattachments\noutput"


@pytest.mark.parametrize(
    "where",
    ["data folder", "project folder", "/etc/shadow", "/root", "/proc/1/environ of the host"],
)
def test_files_outside_the_workspace_are_out_of_reach(
    context: ToolContext, settings: Any, where: str
) -> None:
    secret_file = Path(settings.DATA_DIR) / f"test-secret-{uuid.uuid4().hex}"
    secret_file.write_text("data-folder-secret")
    paths = {
        "data folder": str(secret_file),
        "project folder": str(Path(settings.BASE_DIR) / "manage.py"),
        "/etc/shadow": "/etc/shadow",
        "/root": "/root/.bashrc",
        # PID 1 inside is the sandbox's own init: the host's processes are not visible.
        "/proc/1/environ of the host": f"/proc/{os.getpid()}/environ",
    }
    try:
        result = run_python(READ_CODE.format(path=paths[where]), context)
    finally:
        secret_file.unlink()

    assert stdout_of(result) == "failed: FileNotFoundError"


def test_the_servers_environment_is_not_passed_in(
    context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTRY_TEST_SECRET", "server-secret-value")

    result = run_shell("env | sort", context)

    assert "server-secret-value" not in result
    assert sorted(line.split("=", 1)[0] for line in stdout_of(result).splitlines()) == [
        "HOME",
        "LANG",
        "MPLBACKEND",
        "MPLCONFIGDIR",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "PATH",
        "PWD",
        "PYTHONDONTWRITEBYTECODE",
        "TMPDIR",
    ]


def test_the_system_is_read_only(context: ToolContext) -> None:
    result = run_shell("touch /usr/evil 2>&1; echo $?", context)

    assert stdout_of(result) == "touch: cannot touch '/usr/evil': Read-only file system\n1"


def test_a_symlink_written_to_output_is_not_listed(context: ToolContext) -> None:
    result = run_shell("ln -s /etc/passwd output/passwd; echo hi > output/real.txt", context)

    assert result.endswith(
        "files in output/ (shown to the user with download links):\n- real.txt (text/plain, 3 bytes)"
    )


def test_output_replaced_by_a_link_to_a_host_folder_lists_nothing(context: ToolContext) -> None:
    # On the host, the link would lead to the host's /etc, full of regular files.
    result = run_shell("rm -r output && ln -s /etc output && test -L output && echo linked", context)

    assert stdout_of(result) == "linked"
    assert "files in output/" not in result


def test_a_link_in_place_of_the_code_folder_is_replaced(context: ToolContext, settings: Any) -> None:
    target = Path(settings.SANDBOX_ROOT) / "elsewhere"
    target.mkdir()
    workspace = session_workspace_path(context.tenant_id, context.session_id)
    run_shell("true", context)
    code_folder = folders_for(workspace).code
    shutil.rmtree(code_folder)
    code_folder.symlink_to(target)
    # A workspace saved before the inputs moved beside it held its own .code folder.
    (workspace / ".code").symlink_to(target)

    result = run_python("print('ran')", context)

    assert stdout_of(result) == "ran"
    assert list(target.iterdir()) == []
    assert code_folder.is_dir() and not code_folder.is_symlink()
    assert not (workspace / ".code").exists()
