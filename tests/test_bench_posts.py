"""``bench/burst_posts.py``: the burst's own HTTP client reads what a server answers."""

import asyncio
import json

from bench.burst_posts import Post, PostOutcome, PostTarget, _post

RUN_ID = "0b7f6a0e-8f7a-4d5e-9a53-0e4e1c7a1d2b"


async def _answer_with(status_line: str, body: bytes, requests: list[bytes]) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        requests.append(head + await reader.readexactly(length))
        writer.write(f"HTTP/1.1 {status_line}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", 0)


def _post_to(status_line: str, body: bytes) -> tuple[PostOutcome, list[bytes]]:
    requests: list[bytes] = []

    async def scenario() -> PostOutcome:
        server = await _answer_with(status_line, body, requests)
        port = server.sockets[0].getsockname()[1]
        async with server:
            return await _post(PostTarget(f"http://127.0.0.1:{port}", "agt_key", 10.0), Post("s1", "Hi"))

    return asyncio.run(scenario()), requests


def test_an_accepted_post_gives_its_run_and_sends_the_message() -> None:
    outcome, requests = _post_to("202 Accepted", json.dumps({"run": {"id": RUN_ID}}).encode())

    assert (outcome.status, outcome.run_id, outcome.error) == (202, RUN_ID, "")
    assert outcome.seconds is not None and outcome.seconds > 0
    head, body = requests[0].split(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /api/v1/sessions/s1/messages/ HTTP/1.1"
    assert b"Authorization: Bearer agt_key" in head.split(b"\r\n")
    assert json.loads(body) == {"content": "Hi"}


def test_a_refused_post_says_why_and_has_no_run() -> None:
    outcome, _ = _post_to("429 Too Many Requests", b'{"error": "throttled"}')

    assert (outcome.status, outcome.run_id) == (429, "")
    assert outcome.error == '429 b\'{"error": "throttled"}\''


def test_no_server_is_an_error_without_an_answer() -> None:
    async def scenario() -> PostOutcome:
        server = await asyncio.start_server(lambda reader, writer: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        return await _post(PostTarget(f"http://127.0.0.1:{port}", "agt_key", 10.0), Post("s1", "Hi"))

    outcome = asyncio.run(scenario())

    assert (outcome.status, outcome.seconds) == (None, None)
    assert outcome.error.startswith("ConnectionRefusedError")
