"""Bombs and runaways end within their limits, say which limit, and leave the worker serving."""

import random
import threading
import time
from pathlib import Path

import pytest

from core.errors import ToolError
from tests.sandbox.conftest import make_context, run_python, run_shell, stdout_of
from tools.builtins.base import ToolContext
from tools.sandbox.workspaces import session_workspace_path


def timed(function: object, *arguments: object) -> tuple[str, float]:
    started = time.monotonic()
    result = function(*arguments)  # type: ignore[operator]
    return result, time.monotonic() - started


def test_a_fork_bomb_hits_the_process_limit(context: ToolContext) -> None:
    result, elapsed = timed(run_python, "import os\nwhile True:\n    os.fork()", context)

    assert "limit hit: process limit: a new process or thread could not be started (32 processes" in result
    assert elapsed < 10
    assert stdout_of(run_python("print('still serving')", context)) == "still serving"


def test_a_shell_fork_bomb_ends(context: ToolContext) -> None:
    # The script itself forks until it cannot, keeping what it started: a bomb that only forks in
    # the background let the script reach its end before any fork failed, on a busy machine.
    bomb = "bomb() { bomb | bomb & }; bomb; while :; do sleep 30 & done"
    result, elapsed = timed(run_shell, bomb, context)

    assert "limit hit: process limit" in result
    assert elapsed < 10


def test_a_memory_bomb_hits_the_memory_limit(context: ToolContext) -> None:
    result, elapsed = timed(run_python, "data = bytearray(10 * 1024**3)", context)

    assert result.startswith(
        "exit code: 1\nlimit hit: memory limit: an allocation failed (536,870,912 bytes of address space)"
    )
    assert result.rstrip().endswith("MemoryError")
    assert elapsed < 5


def test_a_growing_memory_bomb_hits_the_memory_limit(context: ToolContext) -> None:
    result, elapsed = timed(
        run_python, "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024**2))", context
    )

    assert "limit hit: memory limit" in result
    assert elapsed < 5


def test_an_infinite_loop_hits_the_cpu_limit(context: ToolContext) -> None:
    result, elapsed = timed(run_python, "while True:\n    pass", context)

    assert result.startswith("exit code: 152\nlimit hit: CPU time limit: the process was killed (2 s of CPU)")
    assert 1.5 < elapsed < 5


def test_sleeping_past_the_wall_limit_is_killed(context: ToolContext, settings: object) -> None:
    settings.SANDBOX_WALL_SECONDS = 1.0  # type: ignore[attr-defined]

    result, elapsed = timed(run_shell, "sleep 30", context)

    assert result.startswith("exit code: -9\nlimit hit: wall-clock time limit: the sandbox was killed (1 s)")
    assert elapsed < 2


@pytest.mark.parametrize(
    ("language", "code"),
    [
        ("shell", "dd if=/dev/zero of=big bs=1M count=10240"),
        (
            "python",
            "with open('big', 'wb') as file:\n    for _ in range(10240):\n        file.write(bytes(1 << 20))",
        ),
    ],
)
def test_a_ten_gigabyte_write_hits_the_file_size_limit(
    context: ToolContext, language: str, code: str
) -> None:
    runner = run_shell if language == "shell" else run_python

    result, elapsed = timed(runner, code, context)

    assert (
        "limit hit: file size limit: a write past the largest allowed file failed (10,485,760 bytes" in result
    )
    assert (session_workspace_path(context.tenant_id, context.session_id) / "big").stat().st_size <= 10 << 20
    assert elapsed < 5


def test_output_past_the_limit_is_cut(context: ToolContext) -> None:
    result = run_python("print('x' * 200_000)", context)

    assert stdout_of(result) == "x" * (64 << 10) + "\n[output truncated]"


def test_cancel_kills_a_busy_loop_within_two_seconds() -> None:
    stop = threading.Event()
    context = make_context(should_stop=stop.is_set)
    threading.Timer(0.5, stop.set).start()

    started = time.monotonic()
    with pytest.raises(ToolError, match="stopped: the run was cancelled and the sandbox killed"):
        run_python("while True:\n    pass", context)

    assert time.monotonic() - started < 2


def test_a_killed_sandbox_leaves_no_process_behind(context: ToolContext, settings: object) -> None:
    settings.SANDBOX_WALL_SECONDS = 1.0  # type: ignore[attr-defined]

    # A duration no other process on the machine is likely to sleep.
    duration = f"60.{random.randrange(10**8):08d}"

    run_shell(f"(sleep {duration} &) ; sleep {duration}", context)

    marker = f"sleep\0{duration}".encode()
    assert [path for path in Path("/proc").glob("[0-9]*/cmdline") if marker in _contents(path)] == []


def _contents(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""  # the process ended while we looked
