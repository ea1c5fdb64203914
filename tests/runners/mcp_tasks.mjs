// The official TypeScript MCP SDK's client (loaded from the npm prefix MCP_PREFIX) driving
// MCP tasks (2025-11-25) on the sidecar's /mcp as the agent whose token is MCP_TOKEN. Prints
// one JSON line per thing the client saw: the stream's messages, each task status
// notification (on the session's GET stream, which the SDK opens after the handshake), each
// answer or refusal.
// Usage: node mcp_tasks.mjs stream|cancel TOOL ARGUMENTS_JSON (cancel: once a line comes on stdin)
//        node mcp_tasks.mjs foreign|await TASK_ID
import { join } from "node:path";
import { createInterface } from "node:readline";
import { pathToFileURL } from "node:url";

async function load(path) {
  const dist = join(process.env.MCP_PREFIX, "node_modules", "@modelcontextprotocol", "sdk");
  return import(pathToFileURL(join(dist, "dist", "esm", path)).href);
}

const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { CallToolResultSchema, TaskStatusNotificationSchema } = await load("types.js");

const print = (event, fields) => console.log(JSON.stringify({ event, ...fields }));
const refusal = (error) => ({ code: error.code, message: error.message });

const TERMINAL = ["completed", "failed", "cancelled"];
const told = [];
let toldMore = () => {};
const client = new Client({ name: "clawpod-tasks-test", version: "1" });
client.setNotificationHandler(TaskStatusNotificationSchema, (notification) => {
  print("notification", { params: notification.params });
  told.push(notification.params);
  toldMore();
});

// Until a status notification says the task ended (the test's guard bounds the wait).
async function toldEnd(taskId) {
  const ended = () => told.some((p) => p.taskId === taskId && TERMINAL.includes(p.status));
  while (!ended()) await new Promise((resolve) => (toldMore = resolve));
}
const transport = new StreamableHTTPClientTransport(new URL(process.env.MCP_URL), {
  requestInit: { headers: { Authorization: `Bearer ${process.env.MCP_TOKEN}` } },
});
await client.connect(transport);
print("connected", { capabilities: client.getServerCapabilities() });

// The test's word that the moment has come: one line on stdin.
async function cue() {
  const lines = createInterface({ input: process.stdin });
  for await (const _ of lines) break;
  lines.close();
}

async function attempt(name, ask) {
  try {
    print(name, { answer: await ask() });
  } catch (error) {
    print(name, { refused: refusal(error) });
  }
}

// A task-augmented call polled by the SDK to its end (tasks/get, then tasks/result), and told
// its end by notification; with `cancel`, the task is cancelled once it exists and the
// test says so, and asked for again afterwards.
async function stream(cancel, tool, args) {
  await client.listTools(); // the SDK learns which tools take tasks (execution.taskSupport)
  const tasks = client.experimental.tasks;
  let taskId;
  for await (const message of tasks.callToolStream({ name: tool, arguments: args })) {
    if (message.type === "error") {
      print("error", refusal(message.error));
      continue;
    }
    print(message.type, message);
    if (message.type === "taskCreated") {
      taskId = message.task.taskId;
      if (cancel) {
        await cue();
        await attempt("cancel", () => tasks.cancelTask(taskId));
      }
    }
  }
  if (cancel && taskId) {
    await attempt("result", () => tasks.getTaskResult(taskId));
    await attempt("cancelAgain", () => tasks.cancelTask(taskId));
  } else if (taskId) {
    await toldEnd(taskId);
  }
  await attempt("list", () => tasks.listTasks());
}

// Another agent's task id: every method refuses it, and the list holds none of it.
async function foreign(taskId) {
  const tasks = client.experimental.tasks;
  await attempt("get", () => tasks.getTask(taskId));
  await attempt("result", () => tasks.getTaskResult(taskId));
  await attempt("cancel", () => tasks.cancelTask(taskId));
  await attempt("list", () => tasks.listTasks());
}

// A task made before (by another run of the client, before a restart): polled with the SDK's
// tasks/get until it ends, then its result.
async function awaitTask(taskId) {
  const tasks = client.experimental.tasks;
  let task = await tasks.getTask(taskId);
  print("taskStatus", { task });
  while (!TERMINAL.includes(task.status)) {
    await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 1000));
    task = await tasks.getTask(taskId);
    print("taskStatus", { task });
  }
  // 1.32.2 reads the result with the schema given: without one it fails before it reads.
  await attempt("result", () => tasks.getTaskResult(taskId, CallToolResultSchema));
}

const [scenario, ...rest] = process.argv.slice(2);
if (scenario === "foreign") await foreign(rest[0]);
else if (scenario === "await") await awaitTask(rest[0]);
else await stream(scenario === "cancel", rest[0], JSON.parse(rest[1]));
await client.close();
