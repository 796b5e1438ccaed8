"""Fan-out of one session's events to many websocket subscribers through one ASGI process.

Starts uvicorn (one process), opens N websocket subscribers of one session (spread over
a few client processes so the clients are not the bottleneck), emits events from this
process with ``emit_event`` and reports, per mode:

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
import asyncio
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

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
    parser.add_argument(
        "--no-compression", action="store_true", help="clients do not offer permessage-deflate (browsers do)"
    )
    parser.add_argument(
        "--no-server-deflate", action="store_true", help="uvicorn --ws-per-message-deflate false"
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


async def _subscribe(
    url: str, key: str, expected: int, compression: str | None, ready: Any, results: list[float]
) -> None:
    from websockets.asyncio.client import connect
    from websockets.typing import Subprotocol

    subprotocols = [Subprotocol("bearer"), Subprotocol(key)]
    async with connect(
        url, subprotocols=subprotocols, proxy=None, max_queue=None, compression=compression
    ) as ws:
        await ws.recv()  # the warm-up event: this subscription is live
        ready.set()
        received = 0
        while received < expected:
            frame = json.loads(await ws.recv())
            if "seq" not in frame:
                continue
            results.append(time.time() - frame["data"]["sent_at"])
            received += 1


def client_process(
    url: str, key: str, count: int, expected: int, compression: str | None, ready: Any, output: Any
) -> None:
    """Open ``count`` subscribers; report (delays, time the last event arrived)."""

    async def main() -> None:
        results: list[list[float]] = [[] for _ in range(count)]
        events = [asyncio.Event() for _ in range(count)]
        tasks = [
            asyncio.create_task(_subscribe(url, key, expected, compression, events[index], results[index]))
            for index in range(count)
        ]
        await asyncio.gather(*(event.wait() for event in events))
        ready.set()
        await asyncio.gather(*tasks)
        output.put(([delay for result in results for delay in result], time.time()))

    asyncio.run(main())


# --- the bench ------------------------------------------------------------------------


def prepare_environment() -> str:
    mode = "postgres+redis" if os.environ.get("REDIS_URL") else "embedded"
    if not os.environ.get("DATABASE_URL"):
        data_dir = tempfile.mkdtemp(prefix="agentry-bench-")
        os.environ["AGENTRY_DATA_DIR"] = data_dir
        os.environ["DATABASE_URL"] = f"sqlite:///{data_dir}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ["DEBUG"] = "true"
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


def start_server(port: int, log_path: Path, *, is_deflate_allowed: bool) -> subprocess.Popen[bytes]:
    import httpx

    argv = [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1", "--port",
            str(port), "--lifespan", "off", "--no-access-log", "--log-level", "warning",
            "--ws-per-message-deflate", str(is_deflate_allowed).lower()]  # fmt: skip
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

    compression = None if arguments.no_compression else "deflate"
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
            args=(f"{url}?after={after}", key, count, events, compression, ready, output),
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
    server = start_server(port, log_path, is_deflate_allowed=not arguments.no_server_deflate)
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
        ("permessage-deflate", "off" if arguments.no_server_deflate or arguments.no_compression else "on"),
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
