"""Talk to a tenant's MCP server through the official SDK, from synchronous code.

Callers are django-q2 worker threads and request handlers, so each call runs the async
SDK client in its own event loop (``anyio.run``): connect, ``initialize``, one list or
call, disconnect. Every step is bounded by the server's timeouts, and every failure
(refused connection, timeout, HTTP 401, protocol error) becomes ``McpUnavailable`` or a
tool error result: a broken server never crashes the run that uses it.

HTTP servers are reached only through the SSRF guard (``mcp_servers.outbound``). Tenants
learn only that a server could not be reached (``COULD_NOT_CONNECT``), never why: a
name that resolves to a refused address, a closed port, a silent one and a web server that
is not MCP all read the same, so the check cannot map the network; the server log has the
details. The one exception is a refusal the URL alone decides (an address typed in,
``localhost``): the guard's reason then says nothing the tenant did not write. Nothing a
server answers is echoed, except the status of a refused credential.
"""

import asyncio
import concurrent.futures
import dataclasses
import logging
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import IO, Any, TypeVar

import anyio
import httpx2
import mcp_types
from django.conf import settings
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from core.json_schemas import instance_errors
from core.storable import storable, storable_text
from mcp_servers.content import content_as_text
from mcp_servers.models import McpServer, McpTransport
from mcp_servers.outbound import OutboundRefused, PinnedTransport, checked_address
from mcp_servers.results import DiscoveredTool, McpUnavailable, ToolCallResult, ToolListing

logger = logging.getLogger(__name__)

CLIENT_INFO = mcp_types.Implementation(name="agentry", version="1")
MAX_TOOL_PAGES = 20
STDERR_TAIL_CHARS = 1_000
# Closing a connection (DELETE of the HTTP session, stopping a stdio process) gets this
# much time on top of the server's own timeouts before the whole call is abandoned.
TEARDOWN_GRACE_SECONDS = 5.0
COULD_NOT_CONNECT = "could not connect to the server"

ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class Connection:
    """What the async client needs, read from the row before the event loop starts
    (the ORM must not be used inside it)."""

    server_name: str
    transport: str
    url: str
    headers: dict[str, str]
    command: str
    args: list[str]
    env: dict[str, str]
    connect_timeout_seconds: float
    call_timeout_seconds: float
    secrets: tuple[str, ...] = field(repr=False)
    # For HTTP transports: the address the guard checked, where every request goes.
    pinned_address: str = ""

    @classmethod
    def for_server(cls, server: McpServer) -> "Connection":
        headers = {str(name): str(value) for name, value in _credential_map(server.headers).items()}
        if server.token:
            headers["Authorization"] = f"Bearer {server.token}"
        env = {str(name): str(value) for name, value in _credential_map(server.env).items()}
        secrets = [server.token, *headers.values(), *env.values()]
        return cls(
            server_name=server.name,
            transport=server.transport,
            url=server.url,
            headers=headers,
            command=server.command,
            args=[str(argument) for argument in server.args or []],
            env=env,
            connect_timeout_seconds=server.connect_timeout_seconds,
            call_timeout_seconds=server.call_timeout_seconds,
            # Longest first, so a secret that contains another is scrubbed whole.
            secrets=tuple(sorted({value for value in secrets if len(value) >= 4}, key=len, reverse=True)),
        )

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "[redacted]")
        return text


def _credential_map(value: object) -> dict[str, Any]:
    """An EncryptedJSONField's dict (typed as text by the stubs, a dict in Python)."""
    return value if isinstance(value, dict) else {}


def list_server_tools(server: McpServer) -> list[DiscoveredTool]:
    """Connect, initialize and list every tool. Raises ``McpUnavailable``."""
    return discover_server_tools(server).tools


def discover_server_tools(server: McpServer) -> ToolListing:
    """The tools, and how long listing them took once the session was up. Raises ``McpUnavailable``."""
    connection = _connection_for(server)
    return _run_bounded(connection, _list_tools)


def call_server_tool(server: McpServer, tool_name: str, arguments: dict[str, Any]) -> ToolCallResult:
    """Call one tool; an unreachable or failing server yields an error result, never an exception."""
    try:
        if not server.is_enabled:
            raise McpUnavailable("the server is disabled")
        connection = _connection_for(server)

        async def call(session: ClientSession) -> ToolCallResult:
            return await _call_tool(session, tool_name, arguments)

        result = _run_bounded(connection, call)
        # A server that echoes what it was sent must not hand our credentials to the model.
        return ToolCallResult(text=connection.scrub(result.text), is_error=result.is_error)
    except McpUnavailable as error:
        return ToolCallResult(text=f"MCP server {server.name} is unavailable: {error.message}", is_error=True)


def _connection_for(server: McpServer) -> Connection:
    connection = Connection.for_server(server)
    if connection.transport == McpTransport.STDIO:
        if not getattr(settings, "MCP_ALLOW_STDIO", False):
            raise McpUnavailable("stdio servers are disabled on this installation (MCP_ALLOW_STDIO)")
        return connection
    try:
        return dataclasses.replace(connection, pinned_address=checked_address(connection.url))
    except OutboundRefused as error:
        _log_failure(connection, str(error))
        raise McpUnavailable(error.policy_reason or COULD_NOT_CONNECT) from None


def _run_bounded(connection: Connection, operation: Callable[[ClientSession], Awaitable[ResultT]]) -> ResultT:
    with _stderr_capture(connection) as errlog:
        try:
            return _run_in_own_event_loop(_session_run, connection, operation, errlog)
        except McpUnavailable:
            raise
        # The SDK runs transports in task groups, so a failure arrives as an exception
        # group of whatever the transport hit. This boundary turns every one of them into
        # McpUnavailable: a broken server must not crash the worker that called it.
        except Exception as error:
            message = _describe_failure(error, connection)
            if errlog is not None:
                message = _with_stderr_tail(message, errlog)
            message = connection.scrub(message)
            if connection.transport == McpTransport.STDIO:
                # A command the operator allowed and an admin configured: its own words help.
                raise McpUnavailable(message) from None
            _log_failure(connection, message)
            raise McpUnavailable(_tenant_message(error)) from None


def _tenant_message(error: Exception) -> str:
    """What a tenant may learn of an HTTP server's failure: a refused credential, else nothing."""
    leaves = list(_leaf_exceptions(error))
    for leaf in leaves:
        if isinstance(leaf, McpUnavailable):  # our own words: a call that outlived its timeout
            return leaf.message
    for leaf in leaves:
        if isinstance(leaf, HttpRefused):
            return f"the server answered HTTP {leaf.status_code}: check the token and headers"
    return COULD_NOT_CONNECT


def _log_failure(connection: Connection, message: str) -> None:
    logger.info("MCP server %s at %s: %s", connection.server_name, connection.url, message)


def _run_in_own_event_loop(function: Callable[..., Awaitable[ResultT]], *args: Any) -> ResultT:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(function, *args)
    # Called from inside an event loop (an async view, a test client): a thread of its
    # own keeps the two loops apart.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as executor:
        return executor.submit(anyio.run, function, *args).result()


class InvalidToolResult(Exception):
    """A tool's structured result does not match the output schema its server declared."""


class ValidatingClientSession(ClientSession):
    """The SDK's session, with a tool's structured result checked by ``core.json_schemas``.

    The SDK checks it with jsonschema's default regex engine, so a server could hold the
    worker with a catastrophic ``pattern`` in its output schema and a matching result.
    """

    async def validate_tool_result(self, name: str, result: mcp_types.CallToolResult) -> None:
        listing = await self.list_tools()
        output_schema = next((tool.output_schema for tool in listing.tools if tool.name == name), None)
        if output_schema is None:
            return
        if result.structured_content is None and "structured_content" not in result.model_fields_set:
            raise InvalidToolResult(f"tool {name} has an output schema but returned no structured content")
        if errors := instance_errors(dict(output_schema), result.structured_content):
            raise InvalidToolResult(f"tool {name} returned a result its output schema refuses: {errors[0]}")


async def _session_run(
    connection: Connection,
    operation: Callable[[ClientSession], Awaitable[ResultT]],
    errlog: IO[str] | None,
) -> ResultT:
    connect_timeout = connection.connect_timeout_seconds
    call_timeout = connection.call_timeout_seconds
    with anyio.fail_after(connect_timeout + call_timeout + TEARDOWN_GRACE_SECONDS):
        async with (
            _open_transport(connection, errlog) as (read_stream, write_stream),
            ValidatingClientSession(read_stream, write_stream, client_info=CLIENT_INFO) as session,
        ):
            try:
                with anyio.fail_after(connect_timeout):
                    await session.initialize()
            except TimeoutError:
                raise InitializeTimeout(f"no answer to initialize within {connect_timeout:g} s") from None
            try:
                with anyio.fail_after(call_timeout):
                    return await operation(session)
            except TimeoutError:
                raise McpUnavailable(f"no answer within {call_timeout:g} s") from None


@asynccontextmanager
async def _open_transport(connection: Connection, errlog: IO[str] | None) -> AsyncIterator[Any]:
    timeout = httpx2.Timeout(connection.connect_timeout_seconds, read=connection.call_timeout_seconds)
    if connection.transport == McpTransport.STDIO:
        parameters = StdioServerParameters(
            command=connection.command, args=connection.args, env=connection.env
        )
        async with stdio_client(parameters, errlog=errlog) as streams:  # type: ignore[arg-type]
            yield streams
    elif connection.transport == McpTransport.SSE:

        def client_factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _http_client(connection, timeout)

        async with sse_client(
            connection.url,
            headers=connection.headers,
            timeout=connection.connect_timeout_seconds,
            sse_read_timeout=connection.call_timeout_seconds + connection.connect_timeout_seconds,
            httpx_client_factory=client_factory,
        ) as streams:
            yield streams
    else:
        async with (
            _http_client(connection, timeout) as http_client,
            streamable_http_client(connection.url, http_client=http_client) as streams,
        ):
            yield streams


def _http_client(connection: Connection, timeout: httpx2.Timeout | None) -> httpx2.AsyncClient:
    # The SDK answers an HTTP error with a generic JSON-RPC error; this hook keeps the
    # status so "401 Unauthorized" reaches the admin instead of "internal error".
    async def raise_for_auth_status(response: httpx2.Response) -> None:
        if response.status_code in (401, 403):
            raise HttpRefused(response.status_code, response.reason_phrase)

    hooks = {"response": [raise_for_auth_status]}
    if not connection.pinned_address:
        return httpx2.AsyncClient(headers=connection.headers, timeout=timeout, event_hooks=hooks)
    host = httpx2.URL(connection.url).host
    return httpx2.AsyncClient(
        headers=connection.headers,
        timeout=timeout,
        event_hooks=hooks,
        transport=PinnedTransport(host=host, address=connection.pinned_address),
        trust_env=False,
    )


class InitializeTimeout(Exception):
    """No answer to ``initialize``: told to tenants as any other failure to connect, for HTTP servers."""


class HttpRefused(Exception):
    def __init__(self, status_code: int, reason: str) -> None:
        super().__init__(f"HTTP {status_code} {reason}".strip())
        self.status_code = status_code


async def _list_tools(session: ClientSession) -> ToolListing:
    started = time.monotonic()
    tools: list[DiscoveredTool] = []
    cursor: str | None = None
    for _page in range(MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        listing = await session.list_tools(params=params)
        tools.extend(_discovered(tool) for tool in listing.tools)
        cursor = listing.next_cursor
        if not cursor:
            break
    return ToolListing(tools=tools, latency_ms=round((time.monotonic() - started) * 1000))


def _discovered(tool: mcp_types.Tool) -> DiscoveredTool:
    annotations = (
        tool.annotations.model_dump(by_alias=True, exclude_none=True, mode="json") if tool.annotations else {}
    )
    # What a server sends is stored: made storable on both databases (core.storable).
    return DiscoveredTool(
        name=tool.name,
        description=storable_text(tool.description or ""),
        input_schema=storable(dict(tool.input_schema)),
        annotations=storable(annotations),
    )


async def _call_tool(session: ClientSession, tool_name: str, arguments: dict[str, Any]) -> ToolCallResult:
    try:
        result = await session.call_tool(tool_name, arguments)
    except MCPError as error:
        # The server answered with a JSON-RPC error (unknown tool, invalid params): the
        # model should see it and may correct its call.
        return ToolCallResult(text=f"MCP error {error.code}: {error.message}", is_error=True)
    except InvalidToolResult as error:
        return ToolCallResult(text=str(error), is_error=True)
    return ToolCallResult(text=content_as_text(result), is_error=bool(result.is_error))


def _leaf_exceptions(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaf_exceptions(inner)
    else:
        yield error


def _describe_failure(error: Exception, connection: Connection) -> str:
    leaves = list(_leaf_exceptions(error))
    # The most telling leaf first: a refused credential explains the errors it caused.
    for kind in (McpUnavailable, HttpRefused, InitializeTimeout):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return f"{leaf} from {connection.url}" if isinstance(leaf, HttpRefused) else str(leaf)
    leaf = leaves[0]
    target = connection.command if connection.transport == McpTransport.STDIO else connection.url
    if isinstance(leaf, httpx2.ConnectError):
        return f"cannot connect to {target}: {leaf}"
    if isinstance(leaf, httpx2.TimeoutException | TimeoutError):
        return f"timed out talking to {target}"
    if isinstance(leaf, httpx2.HTTPStatusError):
        return f"HTTP {leaf.response.status_code} from {target}"
    if isinstance(leaf, httpx2.HTTPError):
        return f"HTTP error talking to {target}: {leaf}"
    if isinstance(leaf, MCPError):
        return f"MCP error {leaf.code} from {target}: {leaf.message}"
    if isinstance(leaf, FileNotFoundError | PermissionError):
        return f"cannot start {target}: {leaf.strerror or leaf}"
    if isinstance(leaf, OSError):
        return f"connection to {target} failed: {leaf}"
    if isinstance(leaf, ValidationError):
        return f"{target} sent a message that is not valid MCP ({leaf.error_count()} errors)"
    if isinstance(leaf, RuntimeError):
        return f"protocol error with {target}: {leaf}"
    logger.warning("unexpected MCP client failure for %s", connection.server_name, exc_info=leaf)
    return f"{type(leaf).__name__} talking to {target}: {leaf}"


def _with_stderr_tail(message: str, errlog: IO[str]) -> str:
    errlog.flush()
    errlog.seek(0)
    tail = errlog.read()[-STDERR_TAIL_CHARS:].strip()
    return f"{message}; stderr: {tail}" if tail else message


def _stderr_capture(connection: Connection) -> AbstractContextManager[IO[str] | None]:
    """A stdio server's stderr goes to a temporary file, so its last lines can explain a failure."""
    if connection.transport == McpTransport.STDIO:
        return tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
    return nullcontext()
