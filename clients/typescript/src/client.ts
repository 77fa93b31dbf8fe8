/**
 * The MemoryHub API over `fetch`: one method per endpoint, typed answers, one error class.
 *
 * Every failure, whether the server answered with an error or never answered, becomes a
 * `MemoryHubError` carrying the server's own `{"error": {"code", "message"}}` when there is one.
 * Requests that met a busy or briefly failing server (429, 502, 503, 504, or no answer) are sent
 * again after `Retry-After` (capped) or a short delay; every call here is safe to repeat except a
 * conditional write, which the server refuses with 412 the second time instead of applying it twice.
 */

import type {
  FileDeleted,
  FileLines,
  FileList,
  FileListItem,
  FileWritten,
  Job,
  SearchRequest,
  SearchResponse,
  Status,
  SyncEntry,
  SyncResponse,
  ToolDefinitionsResponse,
  ToolFormat,
  ToolResult,
} from "./types.js";

export const API_PREFIX = "/api/v1/";
export const USER_AGENT = "memoryhub-client-ts/0.1";
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
const MAX_RETRY_AFTER_SECONDS = 30;

/** What went wrong, as the server said it (`code`, `message`) or as the network did (`status` 0). */
export class MemoryHubError extends Error {
  readonly status: number;
  readonly code: string;
  readonly retryAfter: number | null;

  constructor(message: string, options: { status: number; code: string; retryAfter?: number | null }) {
    super(message);
    this.name = "MemoryHubError";
    this.status = options.status;
    this.code = options.code;
    this.retryAfter = options.retryAfter ?? null;
  }
}

export interface MemoryHubOptions {
  /** The server's root URL, e.g. `http://127.0.0.1:8000` (a trailing `/api/v1` is tolerated). */
  url: string;
  /** The agent's token (`mh_...`): it decides which agent's memory every call reads and writes. */
  token: string;
  /** Milliseconds before one attempt is abandoned (default 60 s). */
  timeoutMs?: number;
  /** Delays in milliseconds before the second, third, ... attempt (default 1 s, 3 s). */
  retryDelaysMs?: number[];
  /** Another `fetch` (tests, proxies); defaults to the global one. */
  fetch?: typeof fetch;
}

type Query = Record<string, string | number | undefined>;

export class MemoryHub {
  readonly root: string;
  private readonly token: string;
  private readonly timeoutMs: number;
  private readonly retryDelaysMs: number[];
  private readonly fetchImpl: typeof fetch;

  constructor(options: MemoryHubOptions) {
    this.root = rootUrl(options.url);
    if (!options.token) {
      throw new TypeError("MemoryHub needs an agent token (options.token)");
    }
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.retryDelaysMs = options.retryDelaysMs ?? [1_000, 3_000];
    this.fetchImpl = options.fetch ?? globalThis.fetch;
  }

  // --- Files ---------------------------------------------------------------------------------

  /** `PUT files/<path>`: create or replace one file. Unchanged content answers `job: null`. */
  putFile(
    path: string,
    content: string,
    options: { source?: "memory" | "session" | "workspace"; mtime?: string | number } = {},
  ): Promise<FileWritten> {
    return this.request("PUT", filePath(path), { body: { content, ...options } });
  }

  /** `GET files/<path>?from=&lines=` (memory_get): lines of one file. */
  getFile(path: string, options: { from?: number; lines?: number } = {}): Promise<FileLines> {
    return this.request("GET", filePath(path), { query: { from: options.from, lines: options.lines } });
  }

  /** `DELETE files/<path>`: the file is gone from search at once. */
  deleteFile(path: string): Promise<FileDeleted> {
    return this.request("DELETE", filePath(path));
  }

  /** `GET files`: one page of this agent's files. */
  listFiles(options: { prefix?: string; source?: string; limit?: number; offset?: number } = {}): Promise<FileList> {
    return this.request("GET", "files", { query: options });
  }

  /** Every file under `prefix`, following the pages. */
  async *iterFiles(options: { prefix?: string; source?: string } = {}): AsyncGenerator<FileListItem> {
    let offset = 0;
    for (;;) {
      const page = await this.listFiles({ ...options, limit: 1000, offset });
      yield* page.results;
      offset += page.results.length;
      if (!page.next || page.results.length === 0) return;
    }
  }

  // --- Sync, jobs, status ----------------------------------------------------------------------

  /**
   * `POST sync`: state what the server should hold. Entries with only a `hash` come back in
   * `needed` when the server lacks that content; send those again with `content`.
   */
  sync(files: SyncEntry[], options: { deleteMissing?: boolean; prefix?: string } = {}): Promise<SyncResponse> {
    const body: Record<string, unknown> = { files, delete_missing: options.deleteMissing ?? false };
    if (options.prefix) body.prefix = options.prefix;
    return this.request("POST", "sync", { body });
  }

  /** `GET jobs/<id>`: what one indexing job did. */
  job(id: number): Promise<Job> {
    return this.request("GET", `jobs/${encodeURIComponent(String(id))}`);
  }

  /** `GET status`: `pending` is 0 once every accepted change is searchable. */
  status(): Promise<Status> {
    return this.request("GET", "status");
  }

  /** Wait until `status.pending` is 0 (polling), or throw after `timeoutMs`. */
  async waitUntilIndexed(options: { timeoutMs?: number; pollMs?: number } = {}): Promise<Status> {
    const deadline = Date.now() + (options.timeoutMs ?? 120_000);
    for (;;) {
      const status = await this.status();
      if (status.pending === 0) return status;
      if (Date.now() > deadline) {
        throw new MemoryHubError(`still ${status.pending} file(s) pending after ${options.timeoutMs ?? 120_000} ms`, {
          status: 0,
          code: "timeout",
        });
      }
      await sleep(options.pollMs ?? 500);
    }
  }

  // --- Search and tools ------------------------------------------------------------------------

  /** `POST search`: a few short snippets, each citing file and lines. */
  search(query: string, options: Omit<SearchRequest, "query"> = {}): Promise<SearchResponse> {
    return this.request("POST", "search", { body: { query, ...options } });
  }

  /** `GET tools?format=`: the tool definitions in one framework's shape. */
  toolDefinitions(format: ToolFormat = "openai"): Promise<ToolDefinitionsResponse> {
    return this.request("GET", "tools", { query: { format } });
  }

  /** `POST tools/<name>`: run one tool with the arguments the model gave it. */
  runTool(name: string, args: Record<string, unknown>): Promise<ToolResult> {
    return this.request("POST", `tools/${encodeURIComponent(name)}`, { body: args });
  }

  // --- Transport -------------------------------------------------------------------------------

  /** One API call; `endpoint` is relative to `/api/v1/`. */
  async request<T>(method: string, endpoint: string, options: { body?: unknown; query?: Query } = {}): Promise<T> {
    const url = new URL(this.root + API_PREFIX.slice(1) + endpoint);
    for (const [key, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined && value !== "") url.searchParams.set(key, String(value));
    }
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.token}`,
      Accept: "application/json",
      "User-Agent": USER_AGENT,
    };
    let body: string | undefined;
    if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers["Content-Type"] = "application/json; charset=utf-8";
    }
    for (let attempt = 0; ; attempt++) {
      try {
        return (await this.send(`${method} ${endpoint}`, method, url, headers, body)) as T;
      } catch (error) {
        const retryable = error instanceof MemoryHubError && (error.status === 0 || RETRY_STATUSES.has(error.status));
        if (!retryable || attempt >= this.retryDelaysMs.length) throw error;
        const delay = error.retryAfter !== null ? error.retryAfter * 1000 : this.retryDelaysMs[attempt]!;
        await sleep(delay);
      }
    }
  }

  private async send(
    where: string,
    method: string,
    url: URL,
    headers: Record<string, string>,
    body?: string,
  ): Promise<unknown> {
    let response: Response;
    try {
      response = await this.fetchImpl(url, { method, headers, body, signal: AbortSignal.timeout(this.timeoutMs) });
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new MemoryHubError(`cannot reach ${this.root} for ${where}: ${reason}`, { status: 0, code: "unreachable" });
    }
    const text = await response.text();
    if (!response.ok) throw httpError(response, text, where);
    if (!text) return {};
    try {
      return JSON.parse(text);
    } catch {
      throw new MemoryHubError(`${where} answered something that is not JSON (is ${this.root} a MemoryHub server?)`, {
        status: response.status,
        code: "not_json",
      });
    }
  }
}

function httpError(response: Response, text: string, where: string): MemoryHubError {
  let code = `http_${response.status}`;
  let message = `${response.statusText || "error"} (not a MemoryHub error body)`;
  try {
    const error = JSON.parse(text).error;
    if (error && typeof error.code === "string" && typeof error.message === "string") {
      code = error.code;
      message = error.message;
    }
  } catch {
    // not JSON: keep the status line
  }
  const header = Number(response.headers.get("Retry-After"));
  const retryAfter = Number.isFinite(header) && header >= 0 ? Math.min(header, MAX_RETRY_AFTER_SECONDS) : null;
  return new MemoryHubError(`${where}: ${response.status} ${code}: ${message}`, {
    status: response.status,
    code,
    retryAfter,
  });
}

function rootUrl(raw: string): string {
  let url: URL;
  try {
    url = new URL((raw ?? "").trim());
  } catch {
    throw new TypeError(`the server URL must look like http://host:port, not ${JSON.stringify(raw)}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`the server URL must be http or https, not ${JSON.stringify(raw)}`);
  }
  const path = url.pathname.replace(/\/+$/, "").replace(/\/api\/v1$/, "");
  return `${url.origin}${path}/`;
}

/** Each path segment percent-encoded, the slashes kept (the server reads `files/<path>`). */
function filePath(path: string): string {
  return "files/" + path.split("/").map(encodeURIComponent).join("/");
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
