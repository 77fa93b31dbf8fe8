/**
 * MemoryHub's agent tools for the OpenAI and Anthropic SDKs: the definitions to hand to the model,
 * and a dispatcher that runs the model's tool calls against the server and shapes the answers as each
 * SDK expects them back.
 *
 * The definitions come from the server (`GET tools?format=`), so they always match what the server
 * accepts. A tool call that fails (bad arguments, a file that does not exist) becomes a tool result
 * marked as an error, with the server's message, so the model can correct itself; only a failure to
 * reach the server at all is thrown.
 */

import { MemoryHub, MemoryHubError } from "./client.js";

/** A tool call as the OpenAI chat-completions SDK returns it (`message.tool_calls[i]`). */
export interface OpenAIToolCall {
  id: string;
  type?: "function";
  function: { name: string; arguments: string };
}

/** What goes back into the OpenAI `messages` list for one tool call. */
export interface OpenAIToolMessage {
  role: "tool";
  tool_call_id: string;
  content: string;
}

/** A `tool_use` content block as the Anthropic SDK returns it. */
export interface AnthropicToolUse {
  type: "tool_use";
  id: string;
  name: string;
  input: unknown;
}

/** What goes back, inside a `user` message's content, for one `tool_use` block. */
export interface AnthropicToolResult {
  type: "tool_result";
  tool_use_id: string;
  content: string;
  is_error?: boolean;
}

export interface ToolOutcome {
  content: string;
  isError: boolean;
}

export interface MemoryHubTools<Definition> {
  /** Hand these to the model (`tools:` in either SDK). */
  definitions: Definition[];
  /** The tool names the server offers this token (a read-only token gets only the read tools). */
  names: string[];
  /** Run one tool by name; server-side refusals come back as `isError`. */
  run(name: string, args: unknown): Promise<ToolOutcome>;
}

export interface OpenAIMemoryHubTools extends MemoryHubTools<Record<string, unknown>> {
  /** Run every tool call of one assistant message; append the answers to `messages`. */
  handle(toolCalls: OpenAIToolCall[]): Promise<OpenAIToolMessage[]>;
}

export interface AnthropicMemoryHubTools extends MemoryHubTools<Record<string, unknown>> {
  /** Run every `tool_use` block of one assistant message; send the answers as the next user message's content. */
  handle(content: Array<{ type: string }>): Promise<AnthropicToolResult[]>;
}

export function memoryHubTools(client: MemoryHub, options: { format: "anthropic" }): Promise<AnthropicMemoryHubTools>;
export function memoryHubTools(client: MemoryHub, options?: { format?: "openai" }): Promise<OpenAIMemoryHubTools>;
export async function memoryHubTools(
  client: MemoryHub,
  options: { format?: "openai" | "anthropic" } = {},
): Promise<OpenAIMemoryHubTools | AnthropicMemoryHubTools> {
  const format = options.format ?? "openai";
  const { tools } = await client.toolDefinitions(format);
  const names = tools.map((tool) => toolName(tool));
  const run = (name: string, args: unknown) => toolRun(client, names, name, args);

  if (format === "anthropic") {
    const anthropic: AnthropicMemoryHubTools = {
      definitions: tools,
      names,
      run,
      async handle(content) {
        const results: AnthropicToolResult[] = [];
        for (const block of content) {
          if (block.type !== "tool_use") continue;
          const use = block as AnthropicToolUse;
          const outcome = await run(use.name, use.input);
          results.push({
            type: "tool_result",
            tool_use_id: use.id,
            content: outcome.content,
            ...(outcome.isError ? { is_error: true } : {}),
          });
        }
        return results;
      },
    };
    return anthropic;
  }
  const openai: OpenAIMemoryHubTools = {
    definitions: tools,
    names,
    run,
    async handle(toolCalls) {
      const messages: OpenAIToolMessage[] = [];
      for (const call of toolCalls) {
        let args: unknown;
        try {
          args = call.function.arguments ? JSON.parse(call.function.arguments) : {};
        } catch {
          messages.push({ role: "tool", tool_call_id: call.id, content: "Error: the tool arguments are not valid JSON." });
          continue;
        }
        const outcome = await run(call.function.name, args);
        messages.push({
          role: "tool",
          tool_call_id: call.id,
          content: outcome.isError ? `Error: ${outcome.content}` : outcome.content,
        });
      }
      return messages;
    },
  };
  return openai;
}

async function toolRun(client: MemoryHub, names: string[], name: string, args: unknown): Promise<ToolOutcome> {
  if (!names.includes(name)) {
    return { content: `Unknown tool ${JSON.stringify(name)}; the tools are ${names.join(", ")}.`, isError: true };
  }
  if (args === null || typeof args !== "object" || Array.isArray(args)) {
    return { content: "The tool arguments must be a JSON object.", isError: true };
  }
  try {
    const result = await client.runTool(name, args as Record<string, unknown>);
    return { content: result.content, isError: false };
  } catch (error) {
    // The server refused this call (4xx): tell the model why. Anything else (unreachable, 5xx) is thrown.
    if (error instanceof MemoryHubError && error.status >= 400 && error.status < 500 && error.status !== 401) {
      return { content: error.message, isError: true };
    }
    throw error;
  }
}

function toolName(tool: Record<string, unknown>): string {
  // OpenAI: {type: "function", function: {name}}; Anthropic and MCP: {name}.
  const fn = tool.function as { name?: unknown } | undefined;
  const name = fn?.name ?? tool.name;
  if (typeof name !== "string") throw new TypeError("the server sent a tool definition without a name");
  return name;
}
