import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

NOT_MCP_BODY = b"internal dashboard: db password hunter2"


@pytest.fixture(autouse=True)
def allow_the_local_test_servers(settings: Any) -> None:
    """The demo MCP servers listen on 127.0.0.1, which the SSRF guard refuses unless the operator lists it."""
    settings.MCP_ALLOWED_PRIVATE_HOSTS = ["127.0.0.1"]


class NotMcpHandler(BaseHTTPRequestHandler):
    def _answer(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(NOT_MCP_BODY)))
        self.end_headers()
        self.wfile.write(NOT_MCP_BODY)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def live_text_server() -> Iterator[str]:
    """A plain web server on 127.0.0.1 that answers every request with a page that is not MCP."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotMcpHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/mcp"
    server.shutdown()
    server.server_close()
