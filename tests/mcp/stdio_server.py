"""The demo MCP server over stdio: ``python tests/mcp/stdio_server.py``.

``DEMO_GREETING`` from the environment shows that the server's env reaches the process.
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.mcp.servers import build_demo_server

if __name__ == "__main__":
    server = build_demo_server()

    @server.tool()
    def greeting() -> str:
        """The greeting this process was started with, in capitals."""
        return os.environ.get("DEMO_GREETING", "no greeting").upper()

    @server.tool()
    def leak_greeting() -> str:
        """The greeting exactly as configured: a server that echoes a secret."""
        return os.environ.get("DEMO_GREETING", "no greeting")

    server.run("stdio")
