#!/usr/bin/env python3
"""A hostile MCP server over stdio for toolrail's tests: each mode misbehaves in one way a
real server has been seen to. Standard library only; one JSON-RPC message per line.

    server.py MODE [ARG...]

Modes:
  big BYTES ORDER   tool `big` answers with a text of BYTES bytes; ORDER `py` writes
                    {"jsonrpc","id","result"}, `ts` writes {"result","jsonrpc","id"}
  hang              tool `hang` never answers; tool `slow` answers after MS ms (its argument),
                    sending a progress notification every 100 ms until then
  crash MARKER      tool `act` appends a line to MARKER, says so on stderr, then dies
  schemas           tools: `ok`, `nope` (inputSchema "nope"), `deep` (nested 300 levels),
                    one without a name
  output            tool `typed` declares {"n": integer}; {"bad": true} answers {"n": "x"},
                    {"fail": true} an error result carrying {"n": "x"}
  named NAME        one tool called NAME
  flood COUNT LOG   tool `flood` sends COUNT tools/list_changed, then adds tool `v2`;
                    every tools/list is counted in LOG
  setsid PIDFILE    starts `sleep 300` in a session of its own, its pid in PIDFILE
"""

import json
import os
import subprocess
import sys
import threading
import time

MODE = sys.argv[1]
ARGS = sys.argv[2:]
lock = threading.Lock()
state = {"v2": False}


def send(message, order="py"):
    if order == "ts" and "result" in message:
        message = {"result": message["result"], "jsonrpc": "2.0", "id": message["id"]}
    line = json.dumps(message, separators=(",", ":")) + "\n"
    with lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def answer(request_id, result, order="py"):
    send({"jsonrpc": "2.0", "id": request_id, "result": result}, order)


def text(value):
    return {"content": [{"type": "text", "text": value}]}


def tool(name, schema=None, **extra):
    entry = {"name": name, "description": f"the {name} tool",
             "inputSchema": schema if schema is not None else {"type": "object"}}
    entry.update(extra)
    return entry


def nested(depth):
    schema = {"type": "object"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"x": schema}}
    return schema


def tools():
    if MODE == "big":
        return [tool("big")]
    if MODE == "hang":
        return [tool("hang"), tool("slow", {"type": "object", "properties": {"ms": {"type": "integer"}}})]
    if MODE == "crash":
        return [tool("act")]
    if MODE == "schemas":
        return [tool("ok"), tool("nope", "nope"), tool("deep", nested(300)),
                {"description": "no name", "inputSchema": {"type": "object"}}]
    if MODE == "output":
        return [tool("typed", outputSchema={
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})]
    if MODE == "named":
        return [tool(ARGS[0])]
    if MODE == "flood":
        return [tool("flood")] + ([tool("v2")] if state["v2"] else [])
    if MODE == "setsid":
        return [tool("noop")]
    return []


def call(request_id, name, arguments, meta):
    if MODE == "big":
        answer(request_id, text("x" * int(ARGS[0])), ARGS[1])
    elif MODE == "hang" and name == "hang":
        pass
    elif MODE == "hang" and name == "slow":
        token = (meta or {}).get("progressToken")

        def later():
            waited = 0
            total = arguments.get("ms", 1000)
            while waited < total:
                time.sleep(0.1)
                waited += 100
                if token is not None:
                    send({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": token, "progress": waited, "total": total}})
            answer(request_id, text(f"slept {total} ms"))

        threading.Thread(target=later, daemon=True).start()
    elif MODE == "crash":
        with open(ARGS[0], "a") as marker:
            marker.write("acted\n")
        sys.stderr.write("hostile: acted, now crashing\n")
        sys.stderr.flush()
        os._exit(3)
    elif MODE == "output":
        if arguments.get("fail"):
            answer(request_id, {"content": [{"type": "text", "text": "it failed"}],
                                "structuredContent": {"n": "x"}, "isError": True})
        elif arguments.get("bad"):
            answer(request_id, {"content": [{"type": "text", "text": '{"n":"x"}'}],
                                "structuredContent": {"n": "x"}})
        else:
            answer(request_id, {"content": [{"type": "text", "text": '{"n":1}'}],
                                "structuredContent": {"n": 1}})
    elif MODE == "flood":
        for _ in range(int(ARGS[0])):
            send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        state["v2"] = True
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        answer(request_id, text("flooded"))
    else:
        answer(request_id, text("ok"))


def main():
    if MODE == "setsid":
        sleeper = subprocess.Popen(["sleep", "300"], start_new_session=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        with open(ARGS[0], "w") as pidfile:
            pidfile.write(str(sleeper.pid))
    sys.stderr.write(f"hostile: {MODE} server up\n")
    sys.stderr.flush()
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method = message.get("method")
        request_id = message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            answer(request_id, {
                "protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {"listChanged": True}},
                "serverInfo": {"name": "hostile", "version": "1.0"},
            })
        elif method == "tools/list":
            if MODE == "flood":
                with open(ARGS[1], "a") as log:
                    log.write("list\n")
            answer(request_id, {"tools": tools()})
        elif method == "tools/call":
            call(request_id, params.get("name"), params.get("arguments") or {}, params.get("_meta"))
        elif method == "ping":
            answer(request_id, {})
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id,
                  "error": {"code": -32601, "message": f"no method {method}"}})


main()
