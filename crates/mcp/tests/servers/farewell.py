"""An MCP server written with the official Python SDK (PyPI `mcp`) that says how it was
ended, in the file named by its first argument: `closed` when it ends because its stdin
closed, `terminated` on SIGTERM. With `deaf` as its second argument it stays alive after
its stdin closes, so only SIGTERM ends it."""

import pathlib
import signal
import sys
import time

from mcp.server.mcpserver import MCPServer

marker = pathlib.Path(sys.argv[1])
deaf = len(sys.argv) > 2 and sys.argv[2] == "deaf"
server = MCPServer("farewell")


@server.tool()
def hello() -> str:
    """Says hello."""
    return "hello"


def terminated(*_):
    marker.write_text("terminated")
    sys.exit(0)


signal.signal(signal.SIGTERM, terminated)
server.run()
if deaf:
    # Bounded: a client that never signals does not leave it behind for long.
    time.sleep(30)
marker.write_text("closed")
