// The client against a live MemoryHub server, plus the transport's retry and error handling against a
// small local fake. The live tests need MEMORYHUB_URL and MEMORYHUB_TOKEN (a read/write token),
// MEMORYHUB_READ_TOKEN (a read-only token of the same agent) and MEMORYHUB_OTHER_TOKEN (another
// agent's token); tests/client/test_typescript_client.py starts a server, creates those agents and
// runs `npm test` with them set. Without them the live tests are skipped with that reason.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { describe, it } from "node:test";

import { MemoryHub, MemoryHubError, memoryHubTools } from "../dist/index.js";

const { MEMORYHUB_URL: url, MEMORYHUB_TOKEN: token, MEMORYHUB_READ_TOKEN: readToken, MEMORYHUB_OTHER_TOKEN: otherToken } =
  process.env;
const live = url && token && readToken && otherToken
  ? false
  : "no live server: set MEMORYHUB_URL, MEMORYHUB_TOKEN, MEMORYHUB_READ_TOKEN and MEMORYHUB_OTHER_TOKEN (tests/client/test_typescript_client.py does)";

const NOTE = "# Trip\n\nWe fly to Lisbon on the 3rd of May.\n\n## Hotel\n\nThe hotel is near the river, room 512.\n";

describe("against a live server", { skip: live }, () => {
  const hub = () => new MemoryHub({ url, token });

  it("uploads a note, waits for it, finds it with a citation and reads its lines", async () => {
    const written = await hub().putFile("memory/trip.md", NOTE, { source: "memory" });
    assert.equal(written.path, "memory/trip.md");
    assert.match(written.hash, /^[0-9a-f]{64}$/);
    assert.equal((await hub().putFile("memory/trip.md", NOTE)).job, null, "unchanged content queues no job");

    const status = await hub().waitUntilIndexed({ timeoutMs: 60_000 });
    assert.equal(status.pending, 0);
    assert.ok(status.files >= 1);

    const found = await hub().search("which room is the hotel", { max_results: 3 });
    const hit = found.results.find((result) => result.path === "memory/trip.md");
    assert.ok(hit, `memory/trip.md not in ${JSON.stringify(found.results)}`);
    assert.match(hit.snippet, /room 512/);
    assert.ok(hit.start_line <= 7 && hit.end_line >= 7, `lines ${hit.start_line}-${hit.end_line} should cite line 7`);

    const lines = await hub().getFile("memory/trip.md", { from: 3, lines: 1 });
    assert.deepEqual([lines.from, lines.lines, lines.total_lines], [3, 1, 7]);
    assert.equal(lines.content, "We fly to Lisbon on the 3rd of May.");
  });

  it("lists files page by page and reads a job", async () => {
    const written = await hub().putFile("notes/list-me.md", "listed\n");
    const paths = [];
    for await (const file of hub().iterFiles({ prefix: "notes/" })) paths.push(file.path);
    assert.deepEqual(paths, ["notes/list-me.md"]);
    const job = await hub().job(written.job);
    assert.equal(job.id, written.job);
    assert.equal(job.trigger, "upload");
    assert.ok(["queued", "running", "done"].includes(job.state), `job state ${job.state}`);
  });

  it("syncs by hash: content the server lacks comes back as needed", async () => {
    const answer = await hub().sync([{ path: "sync/unknown.md", hash: "0".repeat(64) }]);
    assert.deepEqual(answer.needed, ["sync/unknown.md"]);
    const sent = await hub().sync([{ path: "sync/unknown.md", content: "now it is here\n" }]);
    assert.equal(sent.changed, 1);
  });

  it("deletes a file and search no longer finds it", async () => {
    await hub().putFile("memory/forget-me.md", "The alarm code is zebra-42.\n");
    await hub().waitUntilIndexed({ timeoutMs: 60_000 });
    assert.ok((await hub().search("alarm code zebra")).results.some((r) => r.path === "memory/forget-me.md"));
    const deleted = await hub().deleteFile("memory/forget-me.md");
    assert.equal(deleted.deleted, true);
    assert.ok(!(await hub().search("alarm code zebra")).results.some((r) => r.path === "memory/forget-me.md"));
  });

  it("turns the server's error answers into MemoryHubError with their code", async () => {
    await assert.rejects(hub().getFile("memory/never-written.md"), (error) => {
      assert.ok(error instanceof MemoryHubError);
      assert.equal(error.status, 404);
      assert.equal(typeof error.code, "string");
      return true;
    });
    await assert.rejects(new MemoryHub({ url, token: "mh_wrong" }).status(), (error) => error.status === 401);
    await assert.rejects(new MemoryHub({ url, token: readToken }).putFile("memory/x.md", "x"), (error) => {
      assert.equal(error.status, 403);
      assert.equal(error.code, "insufficient_scope");
      return true;
    });
  });

  it("never shows one agent another agent's memory", async () => {
    await hub().putFile("memory/private.md", "The vault combination is 31-7-19.\n");
    await hub().waitUntilIndexed({ timeoutMs: 60_000 });
    const other = new MemoryHub({ url, token: otherToken });
    await assert.rejects(other.getFile("memory/private.md"), (error) => error.status === 404);
    const found = await other.search("vault combination");
    assert.ok(!found.results.some((result) => result.path === "memory/private.md"));
  });

  it("hands OpenAI tool definitions to a model and answers its tool calls", async () => {
    await hub().putFile("memory/tools.md", "Our deploy day is Thursday.\n");
    await hub().waitUntilIndexed({ timeoutMs: 60_000 });
    const tools = await memoryHubTools(hub());
    assert.ok(tools.names.includes("memory_search") && tools.names.includes("memory_get"));
    assert.equal(tools.definitions[0].type, "function");

    const [answer, broken, unknown] = await tools.handle([
      { id: "call_1", type: "function", function: { name: "memory_search", arguments: '{"query": "deploy day"}' } },
      { id: "call_2", type: "function", function: { name: "memory_get", arguments: "{not json" } },
      { id: "call_3", type: "function", function: { name: "memory_erase", arguments: "{}" } },
    ]);
    assert.deepEqual([answer.role, answer.tool_call_id], ["tool", "call_1"]);
    assert.match(answer.content, /memory\/tools\.md#L1/);
    assert.match(broken.content, /^Error: /);
    assert.match(unknown.content, /^Error: Unknown tool/);
  });

  it("answers Anthropic tool_use blocks, with refusals marked as errors", async () => {
    const tools = await memoryHubTools(hub(), { format: "anthropic" });
    assert.ok(tools.definitions.every((tool) => typeof tool.name === "string" && tool.input_schema));
    const results = await tools.handle([
      { type: "text", text: "Let me look." },
      { type: "tool_use", id: "tu_1", name: "memory_get", input: { path: "memory/trip.md", from: 1, lines: 1 } },
      { type: "tool_use", id: "tu_2", name: "memory_get", input: { path: 42 } },
    ]);
    assert.equal(results.length, 2);
    assert.deepEqual([results[0].type, results[0].tool_use_id, results[0].is_error], ["tool_result", "tu_1", undefined]);
    assert.match(results[0].content, /# Trip/);
    assert.equal(results[1].is_error, true);
  });
});

describe("transport", () => {
  async function fakeServer(handler) {
    const server = createServer(handler);
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    return { server, url: `http://127.0.0.1:${server.address().port}` };
  }

  it("sends a request again after a 503 with Retry-After, with the token and JSON body", async () => {
    const seen = [];
    const { server, url: fake } = await fakeServer((request, response) => {
      let body = "";
      request.on("data", (chunk) => (body += chunk));
      request.on("end", () => {
        seen.push({ method: request.method, path: request.url, auth: request.headers.authorization, body });
        if (seen.length === 1) {
          response.writeHead(503, { "Content-Type": "application/json", "Retry-After": "0" });
          response.end(JSON.stringify({ error: { code: "busy", message: "try again" } }));
        } else {
          response.writeHead(200, { "Content-Type": "application/json" });
          response.end(JSON.stringify({ results: [], mode: "keyword", pending: 0, took_ms: 1, message: "" }));
        }
      });
    });
    try {
      const hub = new MemoryHub({ url: `${fake}/api/v1/`, token: "mh_test", retryDelaysMs: [0] });
      const answer = await hub.search("anything", { max_results: 2 });
      assert.equal(answer.mode, "keyword");
      assert.equal(seen.length, 2);
      assert.deepEqual(seen[1], {
        method: "POST",
        path: "/api/v1/search",
        auth: "Bearer mh_test",
        body: JSON.stringify({ query: "anything", max_results: 2 }),
      });
    } finally {
      server.close();
    }
  });

  it("does not retry a 4xx, and keeps the server's code and message", async () => {
    let calls = 0;
    const { server, url: fake } = await fakeServer((request, response) => {
      calls += 1;
      response.writeHead(400, { "Content-Type": "application/json" });
      response.end(JSON.stringify({ error: { code: "invalid_request", message: "query: This field is required." } }));
    });
    try {
      const hub = new MemoryHub({ url: fake, token: "mh_test", retryDelaysMs: [0, 0] });
      await assert.rejects(hub.search(""), (error) => {
        assert.equal(error.code, "invalid_request");
        assert.match(error.message, /POST search: 400 invalid_request: query: This field is required\./);
        return true;
      });
      assert.equal(calls, 1);
    } finally {
      server.close();
    }
  });

  it("says plainly when nothing answers, or when the answer is not JSON", async () => {
    const closed = new MemoryHub({ url: "http://127.0.0.1:9", token: "mh_test", retryDelaysMs: [] });
    await assert.rejects(closed.status(), (error) => error.status === 0 && error.code === "unreachable");

    const { server, url: fake } = await fakeServer((request, response) => {
      response.writeHead(200, { "Content-Type": "text/html" });
      response.end("<html>not MemoryHub</html>");
    });
    try {
      await assert.rejects(new MemoryHub({ url: fake, token: "mh_test" }).status(), /not JSON/);
    } finally {
      server.close();
    }
  });

  it("refuses a URL that is not http(s) and a missing token", () => {
    assert.throws(() => new MemoryHub({ url: "ftp://example", token: "mh_x" }), /http or https/);
    assert.throws(() => new MemoryHub({ url: "not a url", token: "mh_x" }), /http:\/\/host:port/);
    assert.throws(() => new MemoryHub({ url: "http://127.0.0.1:8000", token: "" }), /token/);
  });
});
