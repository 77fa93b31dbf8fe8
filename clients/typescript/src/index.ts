export { API_PREFIX, MemoryHub, MemoryHubError, USER_AGENT } from "./client.js";
export type { MemoryHubOptions } from "./client.js";
export { memoryHubTools } from "./tools.js";
export type {
  AnthropicMemoryHubTools,
  AnthropicToolResult,
  AnthropicToolUse,
  MemoryHubTools,
  OpenAIMemoryHubTools,
  OpenAIToolCall,
  OpenAIToolMessage,
  ToolOutcome,
} from "./tools.js";
export type * from "./types.js";
