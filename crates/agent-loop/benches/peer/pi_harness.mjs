// Drives pi's agent loop (@mariozechner/pi-agent-core, through its public runAgentLoop)
// with a scripted model stream: the first answer asks for N no-op tool calls in one
// assistant message, the second ends the turn. Tools run in pi's parallel mode. Prints one
// JSON line per N: {"n": N, "per_call_ns": median over the repetitions}, every N measured
// only after all of them were run warm.
// Usage: node pi_harness.mjs N1,N2,... REPS
import { runAgentLoop } from "@mariozechner/pi-agent-core";
import { createAssistantMessageEventStream } from "@mariozechner/pi-ai";
import { Type } from "typebox";

const counts = (process.argv[2] ?? "1,10,100,1000").split(",").map(Number);
const reps = Number(process.argv[3] ?? 15);

const noop = {
  name: "noop",
  label: "noop",
  description: "does nothing",
  parameters: Type.Object({}),
  execute: async () => ({ content: [{ type: "text", text: "ok" }], details: {} }),
};

const zero = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 };
const usage = { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, totalTokens: 0, cost: zero };
const model = {
  id: "scripted", name: "scripted", api: "openai-completions", provider: "bench",
  baseUrl: "http://127.0.0.1:1", reasoning: false, input: ["text"], cost: zero,
  contextWindow: 1_000_000, maxTokens: 1_000,
};

function answer(content, stopReason) {
  return {
    role: "assistant", content, api: model.api, provider: model.provider, model: model.id,
    usage, stopReason, timestamp: Date.now(),
  };
}

function scripted(n) {
  let step = 0;
  return () => {
    const stream = createAssistantMessageEventStream();
    const message = step++ === 0
      ? answer(Array.from({ length: n }, (_, i) => (
          { type: "toolCall", id: `c${i}`, name: "noop", arguments: {} })), "toolUse")
      : answer([{ type: "text", text: "done" }], "stop");
    queueMicrotask(() => {
      stream.push({ type: "start", partial: message });
      stream.push({ type: "done", reason: message.stopReason, message });
    });
    return stream;
  };
}

async function turn(n) {
  const context = { systemPrompt: "", messages: [], tools: [noop] };
  const config = {
    model,
    convertToLlm: (messages) => messages,
    toolExecution: "parallel",
  };
  const prompt = { role: "user", content: [{ type: "text", text: "go" }], timestamp: Date.now() };
  const started = process.hrtime.bigint();
  const messages = await runAgentLoop([prompt], context, config, () => {}, undefined, scripted(n));
  const elapsed = Number(process.hrtime.bigint() - started);
  const results = messages.filter((m) => m.role === "toolResult");
  if (results.length !== n || results.some((r) => r.isError)) {
    throw new Error(`expected ${n} successful results, got ${results.length}`);
  }
  return elapsed;
}

const median = (xs) => xs.slice().sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// Warm the JIT over every count before measuring any: measuring the small counts first,
// in V8's lower tiers, would flatter toolrail.
for (let round = 0; round < 5; round++) {
  for (const n of counts) {
    const times = n >= 1000 ? 1 : 20;
    for (let i = 0; i < times; i++) await turn(n);
  }
}

for (const n of counts) {
  const samples = [];
  for (let i = 0; i < reps; i++) samples.push(await turn(n) / n);
  console.log(JSON.stringify({ n, per_call_ns: median(samples) }));
}
