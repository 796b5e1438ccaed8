"""The processes a benchmark starts: their ports, lifetimes and signals, and what it prints."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

# The checkout whose code the stack runs: this one, or another one's (``BENCH_APP_ROOT``, which
# bench/compare.py sets to measure two checkouts with the same bench, interpreter and packages).
ROOT = Path(os.environ.get("BENCH_APP_ROOT") or Path(__file__).parents[2]).resolve()
PYTHON = sys.executable
# Settings the stack decides; inherited values would point the bench at someone else's services.


STOP_GRACE_SECONDS = 10.0
COMMAND_TIMEOUT_SECONDS = 300.0


class BenchError(RuntimeError):
    """The benchmark could not measure what it set out to measure."""


# --- Processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PipedProcess:
    """A Python function in a spawned process of its own, driven over a pipe.

    ``target(commands, *arguments)`` sends one message when it is ready (kept as ``ready``), then
    answers what it is sent until it receives None.
    """

    START_TIMEOUT_SECONDS = 30.0

    def __init__(self, name: str, target: Callable[..., None], *arguments: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self.commands, child_end = context.Pipe()
        self._process = context.Process(target=target, args=(child_end, *arguments), daemon=True)
        self._process.start()
        if not self.commands.poll(self.START_TIMEOUT_SECONDS):
            self.close()
            raise BenchError(f"the {name} did not start")
        self.ready: Any = self.commands.recv()
        self.pid: int = self._process.pid or 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.commands.send(None)
        self._process.join(timeout=5)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()


class ManagedProcess:
    """A subprocess in its own process group, logging to a file, stopped with its whole group."""

    def __init__(self, name: str, argv: list[str], environment: dict[str, str], log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.environment = environment
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.process is None:
            raise BenchError(f"{self.name} is not started")
        return self.process.pid

    def start(self) -> ManagedProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        return self

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> None:
        """SIGTERM the group, then SIGKILL what is left after the grace period."""
        if self.process is None:
            return
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        # Workers forked by the leader may outlive it; the group still names them.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=STOP_GRACE_SECONDS)

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into KeyboardInterrupt so ``finally`` blocks clean up as on Ctrl-C."""

    def interrupt(signal_number: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signal_number}")

    previous = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def log(message: str) -> None:
    """Progress goes to stderr; stdout carries only the results."""
    print(message, file=sys.stderr, flush=True)


def git_commit() -> str:
    """The short commit hash, with ``+dirty`` when the working tree has changes.

    ``BENCH_COMMIT`` names it when the tree measured is an export (``git archive``) with no ``.git``.
    """
    if os.environ.get("BENCH_COMMIT"):
        return os.environ["BENCH_COMMIT"]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}+dirty" if status else commit
