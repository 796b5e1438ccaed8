"""`manage.py serve` (what `make run` starts): the address only once the server answers, and
Ctrl-C stops the server and the worker within 3 s."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from typing import IO

import httpx
import pytest

from tests.live import ROOT, child_environment, free_port

pytestmark = pytest.mark.django_db(transaction=True)

RUNNING = "Agentry is running on"
WORKER_READY = "run host ready"


def lines_of(stream: IO[str]) -> "queue.Queue[str]":
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def lines_with(lines: "queue.Queue[str]", texts: list[str], *, timeout: float) -> dict[str, str]:
    """The first line holding each of ``texts``, in whatever order they come."""
    found: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while len(found) < len(texts) and (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        found.update({text: line for text in texts if text in line and text not in found})
    missing = [text for text in texts if text not in found]
    assert not missing, f"no line with {missing!r} within {timeout} s"
    return found


def processes_with(text: str) -> list[int]:
    """Pids whose command line holds ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if text.encode() in cmdline.read().replace(b"\0", b" "):
                        found.append(int(entry))
            except OSError:
                continue  # it ended while we looked
    return found


def test_serve_prints_the_address_once_the_server_answers_and_ctrl_c_stops_all_within_3_s() -> None:
    port = free_port()
    serve = subprocess.Popen(  # its own group, so the test can look for anything left behind
        [sys.executable, "manage.py", "serve", "--port", str(port)],
        cwd=ROOT,
        env=child_environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert serve.stdout is not None
        lines = lines_of(serve.stdout)
        # Stopped once both are up: a worker still starting stops sooner than a running one.
        line = lines_with(lines, [RUNNING, WORKER_READY], timeout=120)[RUNNING]
        answer = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)

        serve.send_signal(signal.SIGINT)
        asked_at = time.monotonic()
        serve.wait(timeout=10)
        stopped_after = time.monotonic() - asked_at
    finally:
        if serve.poll() is None:
            os.killpg(serve.pid, signal.SIGKILL)

    assert line.strip() == f"{RUNNING} http://127.0.0.1:{port}/ (Ctrl-C stops it)"
    assert answer.status_code == 200
    assert stopped_after < 3.0
    assert serve.returncode == 0
    assert processes_with(f"--port {port}") == []  # uvicorn, started by serve in a group of its own
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2)
