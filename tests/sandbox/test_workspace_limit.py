"""The workspace limit holds during a call: writes stop at it, the host's disk never takes more."""

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.db import connection

from core.errors import ToolError
from tests.live import wait_until
from tests.sandbox.conftest import make_context, run_python, run_shell, stdout_of
from tools.builtins.base import ToolContext
from tools.sandbox.workspaces import session_workspace_path

LIMIT = 4 << 20
# Folders (one block each on the host) and the rounding of the few small files beside the big one.
SLACK = 64 << 10
WRITE_TEN_TIMES_THE_LIMIT = {
    "python": (
        "chunk = bytes(1 << 20)\n"
        "with open('big', 'wb') as file:\n"
        "    for _ in range(40):\n"
        "        file.write(chunk)"
    ),
    "shell": "dd if=/dev/zero of=big bs=1M count=40",
}
FULL_LINE = (
    "limit hit: workspace size limit: the workspace is full, writes past it fail "
    "(4,194,304 bytes); delete files to free space"
)


@pytest.fixture(autouse=True)
def small_workspace(settings: object) -> None:
    settings.SANDBOX_WORKSPACE_BYTES = LIMIT  # type: ignore[attr-defined]
    # Larger than what is written: the workspace limit, not the per-file one, must stop it.
    settings.SANDBOX_FILE_BYTES = 100 << 20  # type: ignore[attr-defined]


def disk_usage(folder: Path) -> int:
    """Bytes the host's filesystem gave the folder and everything under it (what du counts)."""
    total = 0
    for parent, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            try:
                total += os.lstat(os.path.join(parent, name)).st_blocks * 512
            except FileNotFoundError:
                continue  # replaced while we looked
    return total


@contextmanager
def peak_disk_usage(folder: Path) -> Iterator[list[int]]:
    """Samples the folder's disk usage until the block ends; yields a list holding the peak."""
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], disk_usage(folder))
            done.wait(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()
        peak[0] = max(peak[0], disk_usage(folder))


@pytest.mark.parametrize("language", ["python", "shell"])
def test_a_write_of_ten_times_the_limit_stops_at_the_limit(context: ToolContext, language: str) -> None:
    workspace = session_workspace_path(context.tenant_id, context.session_id)
    runner = run_shell if language == "shell" else run_python

    with peak_disk_usage(workspace.parent) as peak:
        result = runner(WRITE_TEN_TIMES_THE_LIMIT[language], context)

    assert result.startswith(f"exit code: 1\n{FULL_LINE}\n\nstdout:\n")
    assert "No space left on device" in result.split("\nstderr:\n", 1)[1]
    assert LIMIT - SLACK <= (workspace / "big").stat().st_size <= LIMIT
    assert peak[0] <= LIMIT + SLACK


def test_a_full_workspace_still_runs_so_the_code_can_free_space(context: ToolContext) -> None:
    run_shell(WRITE_TEN_TIMES_THE_LIMIT["shell"], context)

    result = run_shell("rm big && echo freed > note.txt && cat note.txt", context)

    assert result.startswith("exit code: 0\n\nstdout:\nfreed\n")
    workspace = session_workspace_path(context.tenant_id, context.session_id)
    assert sorted(path.name for path in workspace.iterdir()) == ["note.txt", "output"]


def test_a_workspace_saved_over_its_limit_refuses_the_next_call(context: ToolContext) -> None:
    """As a workspace filled before the limit was enforced: it cannot fit the sandbox's tmpfs."""
    workspace = session_workspace_path(context.tenant_id, context.session_id)
    run_shell("true", context)
    (workspace / "filled-before.bin").write_bytes(bytes(3 * LIMIT))

    with pytest.raises(ToolError) as refused:
        run_shell("touch ran", context)

    assert str(refused.value) == (
        "refused: this conversation's workspace holds 12,582,912 bytes, over its limit of "
        "4,194,304 bytes, so no code can run in it. Start a new conversation to run code; "
        "deleting this one frees its workspace."
    )
    assert sorted(path.name for path in workspace.iterdir()) == ["filled-before.bin", "output"]


def test_a_workspace_over_a_lowered_limit_refuses_the_next_call(
    context: ToolContext, settings: object
) -> None:
    run_shell("head -c 3000000 /dev/zero > data.bin", context)
    settings.SANDBOX_WORKSPACE_BYTES = 1 << 20  # type: ignore[attr-defined]

    refusal = r"^refused: this conversation's workspace holds 3,002,368 bytes, over"
    with pytest.raises(ToolError, match=refusal):
        run_shell("rm data.bin", context)

    workspace = session_workspace_path(context.tenant_id, context.session_id)
    assert (workspace / "data.bin").stat().st_size == 3_000_000
    assert stdout_of(run_shell("echo fresh", make_context())) == "fresh"


# The filling call runs on a thread of its own, with its own connection.
@pytest.mark.django_db(transaction=True)
def test_another_tenants_code_run_keeps_working_while_one_fills_its_workspace(settings: object) -> None:
    settings.SANDBOX_WALL_SECONDS = 5.0  # type: ignore[attr-defined]
    filler, other = make_context(), make_context()
    # A duration no other process on the machine is likely to sleep: it starts once dd has ended.
    duration = f"3.{random.randrange(10**8):08d}"
    filler_result: list[str] = []

    def fill() -> None:
        try:
            filler_result.append(
                run_shell(f"dd if=/dev/zero of=big bs=1M count=40; sleep {duration}", filler)
            )
        finally:
            connection.close()  # this thread's own: the test database is dropped at the end

    filling = threading.Thread(target=fill)
    filler_workspace = session_workspace_path(filler.tenant_id, filler.session_id)

    with peak_disk_usage(filler_workspace.parent) as peak:
        filling.start()
        wait_until(lambda: is_running(f"sleep\0{duration}".encode()), timeout=5, message="the filler's sleep")
        result, elapsed = timed(lambda: run_python("print('still serving')", other))
        is_filler_running = filling.is_alive()
        filling.join()

    assert stdout_of(result) == "still serving"
    assert is_filler_running
    assert elapsed < 3
    assert filler_result[0].startswith(f"exit code: 0\n{FULL_LINE}\n")
    assert peak[0] <= LIMIT + SLACK


def is_running(command_line: bytes) -> bool:
    return any(command_line in contents(path) for path in Path("/proc").glob("[0-9]*/cmdline"))


def contents(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""  # the process ended while we looked


def timed(function: Callable[[], str]) -> tuple[str, float]:
    started = time.monotonic()
    result = function()
    return result, time.monotonic() - started
