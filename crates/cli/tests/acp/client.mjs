// An ACP client made with the official TypeScript SDK (@agentclientprotocol/sdk), driving
// `toolrail acp` the way an editor would, and printing what it saw as one JSON transcript.
//
// node client.mjs SDK_DIR TOOLRAIL WORKSPACE -- AGENT_ARGS...
//
// First connection: initialize, session/new, three prompts — a call allowed once, a call
// rejected, a batch cancelled while its first call runs. Second connection (a new
// process): session/load of the same session, then one more prompt.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, toolrail, workspace, separator, ...agentArgs] = process.argv.slice(2);
if (separator !== "--") {
  console.error("usage: client.mjs SDK_DIR TOOLRAIL WORKSPACE -- AGENT_ARGS...");
  process.exit(2);
}
const acp = await import(pathToFileURL(join(sdkDir, "dist/v1/stable/acp.js")).href);

// Bounded: a hang is a failure with what was seen so far, not a stuck test.
const transcript = { prompts: [], permissions: [], updates: [], exits: [] };
const deadline = setTimeout(() => {
  transcript.error = "timed out";
  console.log(JSON.stringify(transcript));
  process.exit(1);
}, 90_000);

// The permission answers, in the order the questions come.
const answers = ["allow_once", "reject"];
// The call whose start triggers session/cancel.
const cancelAt = "t3";

async function connection(phase, work) {
  const child = spawn(toolrail, ["acp", ...agentArgs], {
    cwd: workspace,
    stdio: ["pipe", "pipe", "inherit"],
  });
  const exited = new Promise((resolve) => child.on("exit", (code) => resolve(code)));
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const app = acp
    .client({ name: "toolrail-acp-test" })
    .onNotification(acp.methods.client.session.update, async (ctx) => {
      const { sessionId, update } = ctx.params;
      transcript.updates.push({ phase, sessionId, update });
      if (
        update.sessionUpdate === "tool_call_update" &&
        update.toolCallId === cancelAt &&
        update.status === "in_progress"
      ) {
        transcript.cancelled = update.toolCallId;
        await ctx.agent.notify(acp.methods.agent.session.cancel, { sessionId });
      }
    })
    .onRequest(acp.methods.client.session.requestPermission, async (ctx) => {
      const { toolCall, options } = ctx.params;
      const chose = answers.shift() ?? "reject";
      transcript.permissions.push({
        phase,
        toolCallId: toolCall.toolCallId,
        title: toolCall.title,
        kind: toolCall.kind,
        options: options.map((option) => [option.optionId, option.kind]),
        chose,
        // Whether the client had been told of the call before it was asked about it.
        announcedFirst: transcript.updates.some(
          (seen) =>
            seen.update.sessionUpdate === "tool_call" &&
            seen.update.toolCallId === toolCall.toolCallId,
        ),
      });
      return { outcome: { outcome: "selected", optionId: chose } };
    });
  await app.connectWith(stream, async (agent) => {
    const initialized = await agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    });
    transcript[`${phase}Initialize`] = initialized;
    await work(agent);
  });
  try {
    child.stdin.end();
  } catch {
    // Already closed with the connection.
  }
  transcript.exits.push(await exited);
}

async function prompt(agent, phase, sessionId, text) {
  const response = await agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text }],
  });
  transcript.prompts.push({ phase, text, stopReason: response.stopReason });
}

try {
  await connection("live", async (agent) => {
    const session = await agent.request(acp.methods.agent.session.new, {
      cwd: workspace,
      mcpServers: [],
    });
    transcript.sessionId = session.sessionId;
    await prompt(agent, "live", session.sessionId, "Make the file");
    await prompt(agent, "live", session.sessionId, "Make another");
    await prompt(agent, "live", session.sessionId, "Wait a while");
  });
  await connection("load", async (agent) => {
    await agent.request(acp.methods.agent.session.load, {
      sessionId: transcript.sessionId,
      cwd: workspace,
      mcpServers: [],
    });
    transcript.loadedUpdates = transcript.updates.filter((seen) => seen.phase === "load").length;
    await prompt(agent, "load", transcript.sessionId, "Go on");
  });
} catch (error) {
  transcript.error = String(error?.stack ?? error);
}
clearTimeout(deadline);
console.log(JSON.stringify(transcript));
process.exit(transcript.error ? 1 : 0);
