# Drives the OpenAI Agents SDK (openai-agents, through its public Runner.run) with a scripted
# Model: the first answer asks for N calls of a no-op function tool in one assistant message,
# the second ends the turn. No network and no key: the model is a local subclass of the SDK's
# Model interface, and tracing is disabled so no exporter runs. The SDK starts every function
# call of a turn at once, each in its own asyncio task (ToolExecutionConfig's
# max_function_tool_concurrency None, its default, named here). Prints one JSON line per N:
# {"n": N, "per_call_ns": median over the repetitions}, every N measured only after all of
# them were run warm.
# Usage: python openai_agents_harness.py N1,N2,... REPS
import asyncio
import json
import sys
import time

from agents import (
    Agent,
    ModelResponse,
    RunConfig,
    Runner,
    ToolCallOutputItem,
    ToolExecutionConfig,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

counts = [int(n) for n in (sys.argv[1] if len(sys.argv) > 1 else "1,10,100,1000").split(",")]
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 15


# Async on purpose: the SDK runs a plain `def` tool on a worker thread (asyncio.to_thread),
# which would measure the thread pool rather than the runtime.
@function_tool
async def noop(x: int) -> str:
    """Does nothing.

    Args:
        x: ignored.
    """
    return "ok"


class Scripted(Model):
    """Answers from a script built before the turn's clock starts, as toolrail's side does:
    the N calls first, then text ending the turn. It keeps no record of the requests."""

    def __init__(self, n):
        calls = [
            ResponseFunctionToolCall(
                type="function_call", id=f"fc{i}", call_id=f"c{i}", name="noop",
                arguments='{"x": 1}', status="completed",
            )
            for i in range(n)
        ]
        done = ResponseOutputMessage(
            type="message", id="m1", role="assistant", status="completed",
            content=[ResponseOutputText(type="output_text", text="done", annotations=[])],
        )
        self.answers = [[done], calls]  # popped from the end

    async def get_response(self, *args, **kwargs):
        return ModelResponse(output=self.answers.pop(), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the bench runs its turns unstreamed")


config = RunConfig(
    tracing_disabled=True,
    tool_execution=ToolExecutionConfig(max_function_tool_concurrency=None),
)


async def turn(n):
    agent = Agent(name="bench", tools=[noop], model=Scripted(n))
    started = time.perf_counter_ns()
    result = await Runner.run(agent, "go", run_config=config)
    elapsed = time.perf_counter_ns() - started
    outputs = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
    if len(outputs) != n or any(item.output != "ok" for item in outputs) \
            or result.final_output != "done":
        raise RuntimeError(f"expected {n} results of ok and a final done, got {len(outputs)}")
    return elapsed


def median(xs):
    return sorted(xs)[len(xs) // 2]


async def main():
    # The same warm-up as pi's harness, over every count before measuring any: CPython has no
    # JIT here, but its specializing interpreter, pydantic's caches and the SDK's lazy imports
    # warm up too, and the small counts measured cold would flatter toolrail.
    for _ in range(5):
        for n in counts:
            for _ in range(1 if n >= 1000 else 20):
                await turn(n)
    for n in counts:
        samples = [await turn(n) / n for _ in range(reps)]
        print(json.dumps({"n": n, "per_call_ns": median(samples)}), flush=True)


set_tracing_disabled(True)
asyncio.run(main())
