"""A burst's POSTs, sent from a process of their own.

With the posts and the N sockets in one asyncio loop, the bench's own process fell behind at
N = 200: it read answers the server had already sent up to a second late (the server idle, the
bench's process busy), and counted that as the POST's latency. N users' browsers are not one
Python loop. The posting process starts before the burst, opens nothing until released, then
sends every post at once, each on a connection of its own, and reports when each was sent and
answered (its answer's last byte read). Its times are ``time.perf_counter()`` values, which on
Linux read the system-wide monotonic clock, so they compare with the main process's.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from urllib.parse import SplitResult, urlsplit

from bench.common import PipedProcess


@dataclass(frozen=True)
class Post:
    session_id: str
    content: str


@dataclass(frozen=True)
class PostOutcome:
    started: float
    # None when no answer came (the connection failed; ``error`` says how).
    seconds: float | None
    status: int | None
    run_id: str
    error: str


@dataclass(frozen=True)
class PostTarget:
    base_url: str
    api_key: str
    timeout: float


class PostingProcess:
    """Spawned with the posts; ``release()`` sends them all and returns their outcomes in order.
    It stays alive (idle) until ``close()``, so CPU readings taken around the burst can include it."""

    def __init__(self, target: PostTarget, posts: list[Post]) -> None:
        self._process = PipedProcess("posting process", _serve, target, posts)
        self.pid = self._process.pid

    async def release(self) -> list[PostOutcome]:
        self._process.commands.send("release")
        outcomes: list[PostOutcome] = await asyncio.to_thread(self._process.commands.recv)
        return outcomes

    def close(self) -> None:
        self._process.close()


def _serve(commands: Connection, target: PostTarget, posts: list[Post]) -> None:
    commands.send("ready")
    if commands.recv() != "release":
        return
    commands.send(asyncio.run(_post_all(target, posts)))
    commands.recv()  # stays for the CPU reading after the burst, until closed


async def _post_all(target: PostTarget, posts: list[Post]) -> list[PostOutcome]:
    return list(await asyncio.gather(*(_post(target, post) for post in posts)))


async def _post(target: PostTarget, post: Post) -> PostOutcome:
    """One HTTP/1.1 request on a connection of its own, as a user's is after uvicorn's 5 s
    keep-alive. Written out rather than through httpx: at N = 200 on two busy cores, httpx's own
    work per answer delayed reading the last answers by most of a second."""
    url = urlsplit(target.base_url)
    body = json.dumps({"content": post.content}).encode()
    request = (
        f"POST /api/v1/sessions/{post.session_id}/messages/ HTTP/1.1\r\n"
        f"Host: {url.netloc}\r\nAuthorization: Bearer {target.api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body
    started = time.perf_counter()
    try:
        status, answer = await asyncio.wait_for(_exchange(url, request), target.timeout)
    except (OSError, TimeoutError, ValueError) as error:
        return PostOutcome(started, None, None, "", f"{type(error).__name__}: {error}")
    seconds = time.perf_counter() - started
    if status == 202:
        return PostOutcome(started, seconds, status, json.loads(answer)["run"]["id"], "")
    return PostOutcome(started, seconds, status, "", f"{status} {answer[:200]!r}")


async def _exchange(url: SplitResult, request: bytes) -> tuple[int, bytes]:
    """Send ``request``; the answer's status and body (read to its Content-Length)."""
    reader, writer = await asyncio.open_connection(url.hostname, url.port)
    try:
        writer.write(request)
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in header_lines if ": " in line)
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        return int(status_line.split(" ", 2)[1]), body
    finally:
        writer.close()
