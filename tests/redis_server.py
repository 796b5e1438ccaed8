"""A redis-server of a test's (or a benchmark's) own, stopped and started at will.

Taking Redis down must not take down the Redis that other tests, and other people, use: this
one listens on a port of its own, keeps nothing on disk, and answers only on 127.0.0.1.
"""

import contextlib
import shutil
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

REDIS_SERVER = shutil.which("redis-server")
START_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 10.0
PROBE_TIMEOUT_SECONDS = 0.2


class PrivateRedis:
    """``redis-server --port PORT --save "" --appendonly no --bind 127.0.0.1``, logging to a file."""

    def __init__(self, *, port: int, log_path: Path) -> None:
        if REDIS_SERVER is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server)")
        self.port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and return once it answers PING."""
        assert REDIS_SERVER is not None
        argv = [REDIS_SERVER, "--port", str(self.port), "--save", "", "--appendonly", "no"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*argv, "--bind", "127.0.0.1"],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not self.is_answering():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{self.log_tail()}")
            time.sleep(0.01)

    def stop(self) -> None:
        """Shut the server down (SIGTERM; SIGKILL if it lingers) and wait until it has exited."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT_SECONDS)

    def is_answering(self) -> bool:
        # from_url: a client whose connections do not retry, so a server that is down answers False at once.
        client = redis.Redis.from_url(
            self.url, socket_timeout=PROBE_TIMEOUT_SECONDS, socket_connect_timeout=PROBE_TIMEOUT_SECONDS
        )
        try:
            return bool(client.ping())
        except (redis.ConnectionError, redis.TimeoutError):
            return False
        finally:
            client.close()

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def __enter__(self) -> "PrivateRedis":
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()
