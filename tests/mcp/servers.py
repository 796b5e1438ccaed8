"""Real MCP servers built with the official SDK, for the tests to connect to.

``DemoHttpServer`` serves the demo tools over streamable HTTP (``/mcp``) and SSE
(``/sse``) from uvicorn in a background thread, behind a bearer-token check.
``stdio_server.py`` (next to this file) serves the same tools over stdio.
"""

import secrets
import socket
import threading
import time
from types import TracebackType

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from starlette.types import ASGIApp, Receive, Scope, Send


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def build_demo_server() -> MCPServer:
    server = MCPServer("agentry-demo", log_level="WARNING")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def shout(text: str) -> str:
        """Return the text in capitals, with an exclamation mark."""
        return text.upper() + "!"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def fail(reason: str) -> str:
        """Always fails with the given reason."""
        raise ValueError(reason)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def wait(seconds: float) -> str:
        """Answer after the given number of seconds."""
        await anyio.sleep(seconds)
        return f"waited {seconds:g} s"

    return server


class BearerTokenGuard:
    """Answers 401 to any HTTP request without ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b"Bearer")],
                }
            )
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await self.app(scope, receive, send)


class DemoHttpServer:
    """The demo MCP server over HTTP on a free local port; ``stop()`` makes it unreachable."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(24)
        self.mcp = build_demo_server()
        self.port = free_port()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/sse"

    def start(self) -> "DemoHttpServer":
        # Off so tests can reach the server under another host name (see the pinning test).
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        combined = _PathDispatch(
            streamable=self.mcp.streamable_http_app(transport_security=security),
            sse=self.mcp.sse_app(transport_security=security),
        )
        config = uvicorn.Config(
            BearerTokenGuard(combined, self.token),
            host="127.0.0.1",
            port=self.port,
            log_level="warning",
            lifespan="on",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="mcp-demo-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the demo MCP server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._server = None
        self._thread = None

    def __enter__(self) -> "DemoHttpServer":
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()


class _PathDispatch:
    """``/mcp`` goes to the streamable HTTP app, which owns the lifespan (its session
    manager); ``/sse`` and ``/messages/`` go to the SSE app."""

    def __init__(self, *, streamable: ASGIApp, sse: ASGIApp) -> None:
        self.streamable = streamable
        self.sse = sse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or scope.get("path", "").startswith("/mcp"):
            await self.streamable(scope, receive, send)
        else:
            await self.sse(scope, receive, send)
