// The Vercel AI SDK's default OpenAI provider (`openai(model)`: the Responses API) in a tool
// loop with a tool of its own; the SDK is loaded from the npm prefix AI_PREFIX (ai 6 or 7).
// Usage: node vercel_loop.mjs generate|stream
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

async function load(name) {
  const dir = join(process.env.AI_PREFIX, "node_modules", name);
  const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
  return import(pathToFileURL(join(dir, pkg.exports["."].import)).href);
}

const { generateText, streamText, tool, jsonSchema, stepCountIs } = await load("ai");
const { createOpenAI } = await load("@ai-sdk/openai");
const openai = createOpenAI({
  baseURL: process.env.OPENAI_BASE_URL,
  apiKey: process.env.OPENAI_API_KEY,
});
const tools = {
  record_note: tool({
    description: "Record a note for the user.",
    inputSchema: jsonSchema({
      type: "object",
      properties: { text: { type: "string" } },
      required: ["text"],
    }),
    execute: async ({ text }) => "noted: " + text,
  }),
};
const options = {
  model: openai("gpt-4o"),
  tools,
  stopWhen: stepCountIs(5),
  prompt: process.argv[3] ?? "What is AAPL at? Use the quote tool, then record a note.",
};
if (process.argv[2] === "stream") {
  const result = streamText({ ...options, onError: ({ error }) => console.error(error) });
  let text = "";
  for await (const piece of result.textStream) text += piece;
  console.log(text);
} else {
  console.log((await generateText(options)).text);
}
