"""An MCP server written with the official Python SDK (PyPI `mcp`), which speaks the
stateless 2026-07-28 revision: its `grow` tool adds a tool and tells subscribers that the
list changed."""

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("changing")


@server.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `grown`."""

    def grown() -> str:
        """A tool added while the server runs."""
        return "grown"

    server.add_tool(grown, name="grown")
    await ctx.notify_tools_changed()
    return "added"


server.run()
