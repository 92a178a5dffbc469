"""Drives `toolrail mcp serve` with the official Python MCP SDK, as a stranger's client
would, and prints one JSON object of what it saw for the Rust test to check.

usage: python_client.py TOOLRAIL WORKSPACE (stdio | http URL) MODE ANSWERS
MODE is the SDK's connect mode: "auto" (the newest revision both sides speak: questions come
back as a call's input_required result) or "legacy" (the initialize handshake: the server
asks mid-call). ANSWERS is "answers" (the client answers forms: allow once, then reject) or
"none" (it declares no elicitation).
"""

import json
import sys

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters


def text_of(result):
    return "".join(block.text for block in result.content if getattr(block, "type", "") == "text")


def summary(result):
    meta = result.meta or {}
    return {
        "is_error": bool(result.is_error),
        "text": text_of(result)[:2000],
        "text_bytes": len(text_of(result).encode()),
        "code": meta.get("toolrail/error_code"),
        "call_id": meta.get("toolrail/call_id"),
        "structured": result.structured_content,
    }


async def main():
    toolrail, workspace, transport = sys.argv[1], sys.argv[2], sys.argv[3]
    if transport == "stdio":
        server = StdioServerParameters(
            command=toolrail,
            args=["mcp", "serve", "--workspace", workspace],
            cwd=workspace,
        )
        mode, answers = sys.argv[4], sys.argv[5]
    else:
        server = sys.argv[4]
        mode, answers = sys.argv[5], sys.argv[6]
    asked = []
    decisions = ["allow_once", "reject"]

    async def elicit(context, params):
        asked.append(params.message)
        decision = decisions.pop(0) if decisions else "reject"
        return types.ElicitResult(action="accept", content={"decision": decision})

    seen = {"progress": []}
    callback = elicit if answers == "answers" else None
    async with Client(server, mode=mode, elicitation_callback=callback, read_timeout_seconds=60) as client:
        seen["protocol"] = client.protocol_version
        seen["server"] = client.server_info.name if client.server_info else None
        listed = await client.list_tools()
        seen["tools"] = {
            tool.name: {
                "read_only": tool.annotations.read_only_hint if tool.annotations else None,
                "destructive": tool.annotations.destructive_hint if tool.annotations else None,
                "has_output_schema": tool.output_schema is not None,
            }
            for tool in listed.tools
        }
        seen["read"] = summary(await client.call_tool("read", {"path": "notes.txt"}))
        seen["grep"] = summary(await client.call_tool("grep", {"pattern": "needle"}))
        seen["denied"] = summary(await client.call_tool("bash", {"command": "touch denied-marker", "description": "make the marker"}))
        seen["big"] = summary(
            await client.call_tool("bash", {"command": "head -c 5000000 /dev/zero | tr '\\0' a", "description": "print 5 MB"})
        )
        seen["asked"] = summary(await client.call_tool("bash", {"command": "echo asked-and-ran", "description": "a call that asks"}))
        seen["rejected"] = summary(
            await client.call_tool(
                "bash", {"command": "echo asked-rejected > rejected-marker", "description": "a call refused"}
            )
        )
        seen["questions"] = list(asked)

        async def progress(done, total, message):
            seen["progress"].append(message)

        # A slow call, cancelled by the client once it has started.
        with anyio.move_on_after(3) as scope:
            await client.call_tool(
                "bash",
                {"command": "echo slow-started; sleep 30; touch slow-finished", "description": "a slow call"},
                progress_callback=progress,
            )
        seen["slow_cancelled"] = scope.cancelled_caught
        # The session goes on after a cancelled call.
        seen["after_cancel"] = summary(await client.call_tool("read", {"path": "notes.txt"}))
    print(json.dumps(seen))


anyio.run(main)
