"""Fan-out of one session's events to many websocket subscribers through one ASGI process.

Starts uvicorn (one process, served as ``make run`` serves: production settings, no
per-message deflate), opens N websocket subscribers of one session (spread over
``--client-processes``; each reads its sockets in one selector loop and timestamps a frame
when its bytes arrive), emits events from this process with ``emit_event`` and reports,
per mode:

- the delay from emission (wall clock in the event data, taken just before the insert)
  to receipt, median and p99 over every (event, subscriber) pair, at a steady rate;
- the events per second the server sustains to all subscribers in a burst: events
  emitted as fast as the database takes them, rate = events / time until the last
  subscriber has the last one.

Embedded default (no env; a throwaway SQLite database in a temporary directory)::

    .venv/bin/python bench/stream_fanout.py

PostgreSQL + Redis (the database is migrated; the bench's tenant is deleted after)::

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/agentry REDIS_URL=redis://127.0.0.1:6379/0 \\
        .venv/bin/python bench/stream_fanout.py
"""

import argparse
import base64
import hashlib
import json
import multiprocessing
import os
import secrets
import selectors
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument(
        "--client-processes",
        type=int,
        default=1,
        help="keep the clients from starving the server on small hosts",
    )
    parser.add_argument("--events", type=int, default=300, help="events in the steady-rate (latency) phase")
    parser.add_argument("--rate", type=float, default=50.0, help="events per second in the latency phase")
    parser.add_argument("--burst", type=int, default=1000, help="events in the throughput phase")
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- subscribers (client processes) -------------------------------------------------
#
# Each client process reads all its sockets from one selector loop and timestamps a frame
# when its bytes come off the socket: a receipt, as a browser on its own machine would have
# it. A websocket library's per-frame parsing and task switching, done for 100 connections
# one after another in one process, would otherwise count as server delay (about 3 ms at the
# median on the 2-core VM). Frames are parsed only after the phase.

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OPCODE_TEXT, OPCODE_CLOSE, OPCODE_PING, OPCODE_PONG = 0x1, 0x8, 0x9, 0xA


class RawSubscriber:
    """One websocket client connection: handshake, then unmasked server frames read by hand."""

    def __init__(self, url: str, key: str) -> None:
        parsed = urlsplit(url)
        self.sock = socket.create_connection((parsed.hostname, parsed.port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        nonce = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parsed.path}?{parsed.query} HTTP/1.1\r\nHost: {parsed.netloc}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {nonce}\r\nSec-WebSocket-Version: 13\r\n"
            f"Sec-WebSocket-Protocol: bearer, {key}\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        self.buffer = b""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the websocket handshake")
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        # RFC 6455 fixes SHA-1 for the accept token; it is a handshake check, not security.
        digest = hashlib.sha1((nonce + WEBSOCKET_GUID).encode(), usedforsecurity=False).digest()
        accept = base64.b64encode(digest).decode()
        if not head.startswith(b"HTTP/1.1 101") or accept.encode() not in head:
            raise RuntimeError(f"websocket handshake refused: {head[:200]!r}")
        self.sock.setblocking(False)
        self.texts: list[tuple[float, bytes]] = []  # (receipt time, frame payload)
        self.event_count = 0  # frames with a seq: events, not heartbeats

    def read(self, received_at: float) -> bool:
        """Take what the socket holds; False when the server closed it."""
        try:
            chunk = self.sock.recv(1 << 20)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        self.buffer += chunk
        return self._take_frames(received_at)

    def _take_frames(self, received_at: float) -> bool:
        while len(self.buffer) >= 2:
            opcode, length, start = self.buffer[0] & 0x0F, self.buffer[1] & 0x7F, 2
            if length == 126:
                if len(self.buffer) < 4:
                    return True
                length, start = struct.unpack("!H", self.buffer[2:4])[0], 4
            elif length == 127:
                if len(self.buffer) < 10:
                    return True
                length, start = struct.unpack("!Q", self.buffer[2:10])[0], 10
            if len(self.buffer) < start + length:
                return True
            payload, self.buffer = self.buffer[start : start + length], self.buffer[start + length :]
            if opcode == OPCODE_TEXT:
                self.texts.append((received_at, payload))
                self.event_count += b'"seq"' in payload
            elif opcode == OPCODE_PING:
                self._send_frame(OPCODE_PONG, payload)
            elif opcode == OPCODE_CLOSE:
                return False
        return True

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        """A client frame (masked, as clients must), for pongs."""
        mask = os.urandom(4)
        masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
        self.sock.setblocking(True)
        self.sock.sendall(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)
        self.sock.setblocking(False)

    def forget(self) -> None:
        self.texts.clear()
        self.event_count = 0


def client_process(url: str, key: str, count: int, expected: int, ready: Any, output: Any) -> None:
    """Open ``count`` subscribers; report (delays, time the last event arrived)."""
    subscribers = [RawSubscriber(url, key) for _ in range(count)]
    selector = selectors.DefaultSelector()
    for subscriber in subscribers:
        selector.register(subscriber.sock, selectors.EVENT_READ, subscriber)
    # The warm-up event (emitted once all are connected) shows every subscription is live.
    _read_until(selector, subscribers, lambda subscriber: subscriber.event_count >= 1)
    for subscriber in subscribers:
        subscriber.forget()
    ready.set()
    _read_until(selector, subscribers, lambda subscriber: subscriber.event_count >= expected)
    delays, last_receipt = [], 0.0
    for subscriber in subscribers:
        for received_at, text in subscriber.texts:
            frame = json.loads(text)
            if "seq" in frame:
                delays.append(received_at - frame["data"]["sent_at"])
                last_receipt = max(last_receipt, received_at)
        subscriber.sock.close()
    output.put((delays, last_receipt))


def _read_until(selector: Any, subscribers: list[RawSubscriber], is_done: Any) -> None:
    pending = set(subscribers)
    deadline = time.monotonic() + 120
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} subscribers were still waiting after 120 s")
        for selector_key, _ in selector.select(timeout=1.0):
            subscriber = selector_key.data
            if not subscriber.read(time.time()):
                raise RuntimeError("the server closed a subscriber's websocket")
            if subscriber in pending and is_done(subscriber):
                pending.discard(subscriber)


# --- the bench ------------------------------------------------------------------------


def prepare_environment() -> str:
    from cryptography.fernet import Fernet

    mode = "postgres+redis" if os.environ.get("REDIS_URL") else "embedded"
    if not os.environ.get("DATABASE_URL"):
        data_dir = tempfile.mkdtemp(prefix="agentry-bench-")
        os.environ["AGENTRY_DATA_DIR"] = data_dir
        os.environ["DATABASE_URL"] = f"sqlite:///{data_dir}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # Configured like production, as `make run` and bench/agent_turn.py serve.
    os.environ["DEBUG"] = "false"
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(48))
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
    os.environ.setdefault("FIELD_ENCRYPTION_KEYS", Fernet.generate_key().decode())
    return mode


def create_world() -> tuple[Any, Any, str]:
    from django.core.management import call_command

    from agents.models import Agent, ModelProvider
    from sessions.models import Run, RunStatus, Session
    from tenants.models import Role, Tenant
    from tenants.services import api_key_create, membership_set, user_get_or_create

    call_command("migrate", verbosity=0)
    slug = f"bench-{uuid.uuid4().hex[:8]}"
    tenant = Tenant.objects.create(slug=slug, name="Stream bench")
    user, _ = user_get_or_create(email=f"{slug}@bench.local", password=None)
    membership_set(tenant=tenant, user=user, role=Role.OWNER)
    key = api_key_create(tenant=tenant, created_by=user, name="bench", scope="read").plaintext
    agent = Agent.objects.create(tenant=tenant, name="bench", model_provider=ModelProvider.OFFLINE)
    session = Session.objects.create(tenant=tenant, agent=agent, created_by=user)
    run = Run.objects.create(tenant=tenant, session=session, agent=agent, status=RunStatus.EXECUTING)
    return tenant, run, key


def start_server(port: int, log_path: Path) -> subprocess.Popen[bytes]:
    import httpx

    argv = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port",
            str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning",
            "--ws-per-message-deflate", "false"]  # fmt: skip  # as `make run` serves
    server = subprocess.Popen(
        argv, cwd=ROOT, env=dict(os.environ), stdout=log_path.open("wb"), stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    server.kill()
    raise RuntimeError(f"uvicorn did not start:\n{log_path.read_text()}")


def run_phase(
    url: str, key: str, run: Any, arguments: argparse.Namespace, *, events: int, rate: float | None
) -> tuple[list[float], float, float]:
    """Emit ``events`` (at ``rate`` per second, or as fast as possible) to fresh subscribers."""
    from sessions.events import emit_event

    context = multiprocessing.get_context("spawn")
    output = context.Queue()
    processes, readiness = [], []
    per_process = [arguments.subscribers // arguments.client_processes] * arguments.client_processes
    per_process[0] += arguments.subscribers - sum(per_process)
    after = _latest_seq(run)
    for count in per_process:
        ready = context.Event()
        process = context.Process(
            target=client_process,
            args=(f"{url}?after={after}", key, count, events, ready, output),
            daemon=True,
        )
        process.start()
        processes.append(process)
        readiness.append(ready)
    emit_event(
        session_id=run.session_id, run_id=run.pk, event_type="run.status", data={"sent_at": time.time()}
    )
    for ready in readiness:
        if not ready.wait(timeout=60):
            raise RuntimeError("subscribers did not connect")
    started = time.time()
    for index in range(events):
        if rate is not None:
            pause = started + index / rate - time.time()
            if pause > 0:
                time.sleep(pause)
        emit_event(
            session_id=run.session_id,
            run_id=run.pk,
            event_type="text.delta",
            data={"sent_at": time.time(), "i": index},
        )
    emitted = time.time()
    delays: list[float] = []
    finished = started
    for _ in processes:
        process_delays, last_receipt = output.get(timeout=120)
        delays.extend(process_delays)
        finished = max(finished, last_receipt)
    for process in processes:
        process.join(timeout=10)
    return delays, emitted - started, finished - started


def _latest_seq(run: Any) -> int:
    from sessions.event_store import latest_event_seq

    return latest_event_seq(run.session_id)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    arguments = parse_arguments()
    mode = prepare_environment()
    import django

    django.setup()
    from django.db import connection

    load_before = os.getloadavg()[0]
    tenant, run, key = create_world()
    port = free_port()
    log_path = Path(tempfile.mkdtemp(prefix="agentry-bench-log-")) / "server.log"
    server = start_server(port, log_path)
    url = f"ws://127.0.0.1:{port}/ws/sessions/{run.session_id}/"
    try:
        steady, _, _ = run_phase(url, key, run, arguments, events=arguments.events, rate=arguments.rate)
        burst, emit_seconds, deliver_seconds = run_phase(
            url, key, run, arguments, events=arguments.burst, rate=None
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
        if connection.vendor != "sqlite":
            tenant.delete()
    expected = arguments.subscribers
    assert len(steady) == arguments.events * expected and len(burst) == arguments.burst * expected
    delivered_rate = arguments.burst / deliver_seconds
    burst_delays = f"{statistics.median(burst) * 1000:.1f} / {percentile(burst, 0.99) * 1000:.1f} ms"
    rows = [
        ("mode", mode),
        ("database", connection.vendor),
        ("subscribers", str(expected)),
        (f"delay median ({arguments.rate:g} ev/s)", f"{statistics.median(steady) * 1000:.1f} ms"),
        (f"delay p99 ({arguments.rate:g} ev/s)", f"{percentile(steady, 0.99) * 1000:.1f} ms"),
        ("burst events", str(arguments.burst)),
        ("burst emit rate", f"{arguments.burst / emit_seconds:.0f} ev/s"),
        ("burst delivered", f"{delivered_rate:.0f} ev/s to each ({delivered_rate * expected:.0f} frames/s)"),
        ("burst delay median / p99", burst_delays),
        ("host", f"{os.cpu_count()} CPUs, load {load_before:.1f} before, {os.getloadavg()[0]:.1f} after"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
