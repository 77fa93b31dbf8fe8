// A runnable tour of the client: write a note, wait until it is searchable, search it, and answer a
// model's tool call the way an OpenAI chat loop would.
//   MEMORYHUB_URL=http://127.0.0.1:8000 MEMORYHUB_TOKEN=mh_... node examples/quickstart.mjs
import { MemoryHub, memoryHubTools } from "memoryhub-client";

const hub = new MemoryHub({ url: process.env.MEMORYHUB_URL, token: process.env.MEMORYHUB_TOKEN });

await hub.putFile("memory/2026-03-01.md", "# 2026-03-01\n\nWe chose Postgres for the billing service.\n");
await hub.waitUntilIndexed();

const { results } = await hub.search("which database did we choose for billing?");
for (const result of results) {
  console.log(`${result.path}#L${result.start_line}-L${result.end_line} (${result.score.toFixed(2)}): ${result.snippet}`);
}

// In a real loop: const reply = await openai.chat.completions.create({ model, messages, tools: tools.definitions });
// then messages.push(reply.choices[0].message, ...(await tools.handle(reply.choices[0].message.tool_calls ?? [])));
const tools = await memoryHubTools(hub, { format: "openai" });
const [toolMessage] = await tools.handle([
  { id: "call_1", type: "function", function: { name: "memory_search", arguments: JSON.stringify({ query: "billing database" }) } },
]);
console.log(toolMessage.content);
