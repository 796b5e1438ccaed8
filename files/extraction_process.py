"""A document's extraction in a child process, within a CPU, memory and wall-clock budget.

A crafted file of a few hundred kilobytes can keep a parser busy for hours. The child sets
its own ``RLIMIT_CPU`` and ``RLIMIT_AS`` before it reads the document, so the kernel stops it
at the budget; the parent kills it at the wall-clock limit, and as soon as ``is_wanted`` says
the file is no longer wanted (it was deleted). Either way the worker gets its time back and
the owner reads why in the file's reason.

The child is a fresh interpreter that imports only ``files.extraction`` (no Django, no
database connection, an empty environment): it sees the document's bytes and nothing else.
It runs in a session of its own, so a worker that dies leaves it to its CPU limit.
"""

import io
import json
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from files.extraction import ExtractionError, Section, extract_sections

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# How often the parent checks that the file is still wanted, and the clock.
POLL_SECONDS = 0.25
MEMORY_EXHAUSTED_EXIT_CODE = 3
# RLIMIT_CPU's soft limit sends SIGXCPU; a child that survives it gets SIGKILL at the hard one.
CPU_LIMIT_SIGNALS = {-signal.SIGXCPU, -signal.SIGKILL}
SPLIT_ADVICE = "split it into smaller files and upload them again"


@dataclass(frozen=True)
class ExtractionLimits:
    cpu_seconds: int
    memory_bytes: int
    wall_seconds: float


class ExtractionAbandoned(Exception):
    """The file stopped being wanted while it was extracted; its child was killed."""


def extract_sections_within_limits(
    fileobj: BinaryIO, content_type: str, *, limits: ExtractionLimits, is_wanted: Callable[[], bool]
) -> list[Section]:
    """The sections of ``fileobj``, read by a child within ``limits``; ExtractionError with the
    reason when it fails or overruns, ExtractionAbandoned once ``is_wanted()`` turns false."""
    # A file, not a pipe, is the child's input: the parent then only reads while it waits.
    with tempfile.TemporaryFile() as source:
        shutil.copyfileobj(fileobj, source)
        source.seek(0)
        process = subprocess.Popen(  # noqa: S603 - fixed argv, no shell; the type is a detected one
            [
                sys.executable,
                "-E",
                "-s",
                "-m",
                __name__,
                content_type,
                str(limits.cpu_seconds),
                str(limits.memory_bytes),
            ],
            stdin=source,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=PROJECT_ROOT,
            env={},
            start_new_session=True,
        )
    try:
        output, errors = _communicate_while_wanted(process, limits=limits, is_wanted=is_wanted)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return _sections_from_child(process.returncode, output, errors, limits=limits)


def _communicate_while_wanted(
    process: subprocess.Popen[bytes], *, limits: ExtractionLimits, is_wanted: Callable[[], bool]
) -> tuple[bytes, bytes]:
    deadline = time.monotonic() + limits.wall_seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ExtractionError(
                f"the document is too large to extract within the limits: reading it took longer "
                f"than {_seconds(limits.wall_seconds)}; {SPLIT_ADVICE}"
            )
        try:
            # communicate() keeps what it read so far when it times out, and goes on from there.
            return process.communicate(timeout=min(POLL_SECONDS, remaining))
        except subprocess.TimeoutExpired:
            if not is_wanted():
                raise ExtractionAbandoned() from None


def _sections_from_child(
    returncode: int, output: bytes, errors: bytes, *, limits: ExtractionLimits
) -> list[Section]:
    if returncode in CPU_LIMIT_SIGNALS:
        raise ExtractionError(
            f"the document is too large to extract within the limits: reading it needed more than "
            f"{_seconds(limits.cpu_seconds)} of processing; {SPLIT_ADVICE}"
        )
    if returncode == MEMORY_EXHAUSTED_EXIT_CODE:
        raise ExtractionError(
            f"the document is too large to extract within the limits: reading it needed more than "
            f"{limits.memory_bytes // (1024 * 1024):,} MB of memory; {SPLIT_ADVICE}"
        )
    if returncode != 0:
        logger.error("the extraction process exited with %s: %s", returncode, errors.decode(errors="replace"))
        raise ExtractionError(f"the file could not be read (the extraction stopped with code {returncode})")
    result = json.loads(output)
    if "error" in result:
        raise ExtractionError(result["error"])
    return [Section(text=text, page=page, heading=heading) for text, page, heading in result["sections"]]


def _seconds(count: float) -> str:
    return f"{count:g} second" if count == 1 else f"{count:g} seconds"


def _limit_self(cpu_seconds: int, memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a child killed at its limit leaves no core file


def _child_result(data: bytes, content_type: str) -> dict[str, Any]:
    try:
        sections = extract_sections(io.BytesIO(data), content_type)
    except ExtractionError as error:
        return {"error": error.reason}
    except MemoryError:
        raise
    except Exception as error:  # a library's own bug must not look like a crash of the child
        print(f"extracting a {content_type} file failed: {error!r}", file=sys.stderr)
        return {"error": f"the file could not be read ({type(error).__name__})"}
    return {"sections": [[section.text, section.page, section.heading] for section in sections]}


def main(arguments: list[str]) -> None:
    content_type, cpu_seconds, memory_bytes = arguments[0], int(arguments[1]), int(arguments[2])
    _limit_self(cpu_seconds, memory_bytes)
    try:
        answer = json.dumps(_child_result(sys.stdin.buffer.read(), content_type)).encode()
    except MemoryError:
        os._exit(MEMORY_EXHAUSTED_EXIT_CODE)  # nothing left to build an answer with
    sys.stdout.buffer.write(answer)


if __name__ == "__main__":
    main(sys.argv[1:])
