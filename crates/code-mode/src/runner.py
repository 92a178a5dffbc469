# toolrail's Python runner: runs one program whose tool calls go to the host as JSON lines.
#
# Host to runner (stdin): first {"program": str, "sdk": str}, then {"id": n, "reply": {...}}
# for each call, the reply being {"value": v} or {"error": {"code", "message"}}.
# Runner to host (stdout): {"call": name, "id": n, "args": {...}}, {"print": text}, and last
# {"done": value} or {"failed": {"kind": "syntax" | "exception" | "memory", "message": str}}.
#
# The protocol keeps its own copies of fds 0 and 1; the program's fd 0 is /dev/null and its
# fd 1 is stderr, so nothing it writes can be taken for a message.
#
# A program that mentions asyncio runs under asyncio.run, replies arriving on a thread of
# their own, so gathered calls overlap. Any other program is driven here, one call at a
# time: importing asyncio costs more than the rest of the start together. For the same
# reason the program is parsed with the compiler's own `_ast` nodes (the `ast` module costs
# ten milliseconds more), and what only failures need is imported when one happens.
import _ast
import _thread
import json
import os
import sys

_IN = os.fdopen(os.dup(0), "r", encoding="utf-8")
# A lone surrogate (a file name that is not UTF-8, say) is written as `?`: the host reads
# only UTF-8 and strict JSON.
_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="replace")
_NULL = os.open(os.devnull, os.O_RDONLY)
os.dup2(_NULL, 0)
os.dup2(2, 1)
_LOCK = _thread.allocate_lock()
_ONLY_AST = 0x400
_TOP_LEVEL_AWAIT = 0x2000
_PENDING = {}
_STATE = {"next": 0, "loop": None}
# Printed text goes out in pieces no larger than this, far below the host's line limit.
_PRINT_PIECE = 1 << 16


def _encode(message):
    # NaN and infinities are not JSON: refused here, where the program can see why.
    return json.dumps(message, ensure_ascii=False, allow_nan=False)


def _write(line):
    with _LOCK:
        _OUT.write(line + "\n")
        _OUT.flush()


def _send(message):
    _write(_encode(message))


class _Printed:
    """sys.stdout and sys.stderr of the program: what it prints goes to the host, a line at
    a time (one `print` writes its items and its end separately)."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self):
        self._held = []

    def write(self, text):
        text = str(text)
        self._held.append(text)
        if "\n" in text:
            self.flush()
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        if self._held:
            held = "".join(self._held)
            self._held = []
            for start in range(0, len(held), _PRINT_PIECE):
                _send({"print": held[start : start + _PRINT_PIECE]})

    def isatty(self):
        return False


class ToolError(Exception):
    """A tool call that was refused or failed."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class _Awaited:
    """A call's reply awaited outside asyncio: the driver reads it in."""

    __slots__ = ("reply",)

    def __init__(self):
        self.reply = None

    def __await__(self):
        if self.reply is None:
            yield self
        return self.reply


async def __toolrail_call(name, args):
    args = {key: value for key, value in args.items() if value is not None}
    _STATE["next"] += 1
    number = _STATE["next"]
    loop = _STATE["loop"]
    awaited = loop.create_future() if loop is not None else _Awaited()
    line = _encode({"call": name, "id": number, "args": args})
    _PENDING[number] = awaited
    _write(line)
    reply = await awaited
    error = reply.get("error")
    if error is not None:
        raise ToolError(error.get("code"), error.get("message"))
    return reply.get("value")


def _resolve(number, reply):
    future = _PENDING.pop(number, None)
    if future is not None and not future.done():
        future.set_result(reply)


def _read_replies(loop):
    try:
        for line in _IN:
            message = json.loads(line)
            loop.call_soon_threadsafe(_resolve, message["id"], message["reply"])
    except BaseException as error:
        # Without this thread no reply would ever arrive: the run ends here, saying why.
        _failed("runtime", f"the runner stopped reading replies: {type(error).__name__}: {error}")
        _OUT.flush()
        os._exit(1)


def _drive(coroutine):
    """Runs a coroutine that awaits nothing but tool calls, reading each reply in turn."""
    while True:
        try:
            awaited = coroutine.send(None)
        except StopIteration as stop:
            return stop.value
        if not isinstance(awaited, _Awaited):
            coroutine.close()
            raise RuntimeError(
                "only tool calls can be awaited in a program that does not use asyncio; "
                "import asyncio to await anything else"
            )
        while awaited.reply is None:
            line = _IN.readline()
            if not line:
                raise EOFError("the host ended the conversation")
            message = json.loads(line)
            waiting = _PENDING.pop(message["id"], None)
            if waiting is not None:
                waiting.reply = message["reply"]


def _flush_printed():
    if isinstance(sys.stdout, _Printed):
        sys.stdout.flush()


def _failed(kind, message):
    _flush_printed()
    _send({"failed": {"kind": kind, "message": message}})


def _describe(error, program):
    import linecache
    import traceback

    linecache.cache["<program>"] = (len(program), None, program.splitlines(True), "<program>")
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if frame.filename == "<program>"
    ]
    text = "".join(traceback.format_list(frames))
    if frames:
        text = "Traceback (most recent call last):\n" + text
    return text + "".join(traceback.format_exception_only(type(error), error))


def _main():
    first = json.loads(_IN.readline())
    program = first["program"]
    namespace = {"__name__": "__main__", "ToolError": ToolError, "__toolrail_call": __toolrail_call}
    exec(compile(first["sdk"], "<sdk>", "exec"), namespace)
    try:
        tree = compile(program, "<program>", "exec", flags=_ONLY_AST | _TOP_LEVEL_AWAIT)
        # The value of a last expression is the program's result, as in a notebook.
        if tree.body and isinstance(tree.body[-1], _ast.Expr):
            last = tree.body[-1]
            place = {
                field: getattr(last, field)
                for field in ("lineno", "col_offset", "end_lineno", "end_col_offset")
            }
            target = _ast.Name(id="__toolrail_result__", ctx=_ast.Store(), **place)
            tree.body[-1] = _ast.Assign(targets=[target], value=last.value, **place)
        code = compile(tree, "<program>", "exec", flags=_TOP_LEVEL_AWAIT)
    except (SyntaxError, ValueError) as error:
        _failed("syntax", _describe(error, program))
        return
    except (MemoryError, RecursionError) as error:
        _failed("memory", _describe(error, program))
        return

    def run():
        outcome = eval(code, namespace)
        if outcome is not None:
            _drive(outcome)
        return namespace.get("__toolrail_result__")

    def run_with_asyncio():
        import asyncio
        import threading

        async def run():
            loop = asyncio.get_running_loop()
            _STATE["loop"] = loop
            threading.Thread(target=_read_replies, args=(loop,), daemon=True).start()
            outcome = eval(code, namespace)
            if outcome is not None:
                await outcome
            return namespace.get("__toolrail_result__")

        return asyncio.run(run())

    sys.stdout = sys.stderr = _Printed()
    try:
        value = run_with_asyncio() if "asyncio" in program else run()
    except (MemoryError, RecursionError) as error:
        _failed("memory", _describe(error, program))
        return
    except SystemExit as error:
        if error.code not in (None, 0):
            _failed("exception", f"the program exited with {error.code!r}")
            return
        value = None
    except BaseException as error:
        _failed("exception", _describe(error, program))
        return
    _flush_printed()
    try:
        _send({"done": value})
    except (TypeError, ValueError):
        try:
            _send({"done": repr(value)})
        except Exception:
            _send({"done": f"<a {type(value).__name__} that cannot be shown>"})


try:
    _main()
except MemoryError:
    _failed("memory", "MemoryError: the program ran out of memory")
except BaseException as error:
    _failed("runtime", f"the runner failed: {type(error).__name__}: {error}")
finally:
    _OUT.flush()
    os._exit(0)
