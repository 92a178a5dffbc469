"""Edge cases of `toolrail mcp serve` on stdio, driven as a client would drive them.

usage: edge_client.py TOOLRAIL WORKSPACE CASE
  order       four tools/call written in one go, five times: the session's log must hold
              them in the order they were sent (raw JSON-RPC, the handshake revision)
  disconnect  a slow call, then the client closes its end mid-call (raw JSON-RPC)
  abandon     a call that asks, on the stateless revision: the question comes back as
              input_required and the client never answers; a read sent next must still
              be served once the question's own deadline has passed (Python SDK)
Prints one JSON object of what it saw.
"""

import json
import subprocess
import sys
import time


def raw(toolrail, workspace):
    return subprocess.Popen(
        [toolrail, "mcp", "serve", "--workspace", workspace],
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )


def send(server, *messages):
    server.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    server.stdin.flush()


def answers(server, ids):
    """Reads lines until every id in `ids` has its answer."""
    got = {}
    while len(got) < len(ids):
        line = server.stdout.readline()
        if not line:
            break
        message = json.loads(line)
        if message.get("id") in ids:
            got[message["id"]] = message
    return got


def handshake(server):
    send(server, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "edge", "version": "1"}}})
    answers(server, {0})
    send(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def call(id, tool, arguments):
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}}


def order(toolrail, workspace):
    server = raw(toolrail, workspace)
    handshake(server)
    sent = []
    for round in range(5):
        ids = list(range(10 + round * 4, 14 + round * 4))
        sent += ids
        send(server, *[call(i, "read", {"path": "notes.txt"}) for i in ids])
        answers(server, set(ids))
    server.stdin.close()
    server.wait(timeout=60)
    return {"sent": ["mcp-%d" % i for i in sent]}


def disconnect(toolrail, workspace):
    server = raw(toolrail, workspace)
    handshake(server)
    send(server, call(1, "bash", {"command": "sleep 30; touch slow-finished", "description": "slow"}))
    time.sleep(1.5)
    started = time.monotonic()
    server.stdin.close()
    code = server.wait(timeout=90)
    return {"exit": code, "exited_after_s": time.monotonic() - started}


async def abandon_async(toolrail, workspace):
    from mcp import Client, StdioServerParameters
    import mcp_types as types

    async def never(context, params):
        raise AssertionError("the SDK's own loop must not answer: the call is driven by hand")

    server = StdioServerParameters(
        command=toolrail, args=["mcp", "serve", "--workspace", workspace], cwd=workspace)
    seen = {}
    async with Client(server, mode="auto", elicitation_callback=never, read_timeout_seconds=60) as client:
        first = await client.session.call_tool(
            "bash", {"command": "echo asked-and-abandoned > abandoned-marker", "description": "asks"},
            allow_input_required=True)
        seen["first"] = getattr(first, "result_type", None) or type(first).__name__
        started = time.monotonic()
        after = await client.call_tool("read", {"path": "notes.txt"})
        seen["read_after_s"] = time.monotonic() - started
        seen["read_ok"] = not after.is_error
    return seen


def main():
    toolrail, workspace, case = sys.argv[1], sys.argv[2], sys.argv[3]
    if case == "order":
        seen = order(toolrail, workspace)
    elif case == "disconnect":
        seen = disconnect(toolrail, workspace)
    else:
        import anyio
        seen = anyio.run(abandon_async, toolrail, workspace)
    print(json.dumps(seen))


main()
