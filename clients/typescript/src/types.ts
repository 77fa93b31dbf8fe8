/** The shapes of MemoryHub's API v1 answers (see the server's OpenAPI schema at /api/schema/). */

export type Source = "memory" | "session" | "workspace";
export type SearchMode = "hybrid" | "vector" | "keyword";
export type ToolFormat = "openai" | "anthropic" | "mcp";

export interface FileWritten {
  path: string;
  hash: string;
  size: number;
  status: string;
  /** The indexing job queued for this write, or null when the content was unchanged. */
  job: number | null;
}

export interface FileLines {
  path: string;
  from: number;
  lines: number;
  total_lines: number;
  content: string;
  source: Source;
}

export interface FileDeleted {
  path: string;
  deleted: boolean;
  chunks_removed: number;
  job: number;
}

export interface FileListItem {
  path: string;
  hash: string;
  size: number;
  status: string;
  source: Source;
  mtime: string | null;
  last_error: string;
  indexed_at: string | null;
  updated_at: string;
}

export interface FileList {
  count: number;
  next: string | null;
  previous: string | null;
  results: FileListItem[];
}

export interface SyncEntry {
  path: string;
  /** The full text; omit it and give `hash` to ask whether the server already holds this content. */
  content?: string;
  /** sha256 of the UTF-8 content, hex. */
  hash?: string;
  source?: Source;
  mtime?: string | number;
}

export interface SyncResponse {
  job: number | null;
  needed: string[];
  unchanged: number;
  changed: number;
  deleted: string[];
}

export interface Job {
  id: number;
  trigger: string;
  state: string;
  files_seen: number;
  files_changed: number;
  files_removed: number;
  chunks_added: number;
  chunks_removed: number;
  chunks_embedded: number;
  cache_hits: number;
  malformed_lines: number;
  attempts: number;
  error: string;
  created_at: string;
  started_at: string | null;
  finished_at: string | null;
  duration_ms: number | null;
}

export interface Status {
  agent: string;
  files: number;
  chunks: number;
  /** 0 once every accepted change is searchable. */
  pending: number;
  /** Of `pending`, the files keyword search finds already (chunks written, vectors not yet). */
  awaiting_vectors: number;
  failed: number;
  failed_jobs: number;
  embedding: {
    provider: string;
    model: string | null;
    dimensions: number | null;
    vector_search: boolean;
    /** cl100k tokens a chunk may hold (null without vectors); measured for a model not known by name. */
    window?: number | null;
    window_source?: "settings" | "measured" | "unmeasured";
    /** MEMORYHUB_EMBEDDING_REVISION, the operator's name for the model's version (null: none). */
    revision?: string | null;
    /** The last check that the model behind the name still gives the index's vectors. */
    model_check?: {
      state: "same" | "changed" | "unchecked" | "failed";
      checked_at: string | null;
      changed_since: string | null;
    };
  };
  /** Batches of this agent's texts in flight at the provider's batch API (half price, up to 24 h). */
  embedding_batches: {
    id: number;
    provider: string;
    remote_id: string;
    state: "submitting" | "in_flight";
    inputs: number;
    submitted_at: string;
    job: number | null;
  }[];
  /** The memory's words for keyword expansion: how many, and how many have a vector of the model. */
  memory_words?: { words: number; embedded: number };
  last_indexed_at: string | null;
}

export interface SearchRequest {
  query: string;
  max_results?: number;
  min_score?: number;
  mode?: SearchMode;
  sources?: Source[];
  path_prefix?: string;
  modified_since?: string | number;
  modified_until?: string | number;
  explain?: boolean;
  /** "own" (default), "shared" (with the memories granted to this agent) or a list of memory names. */
  scope?: "own" | "shared" | string[];
}

export interface SearchResult {
  path: string;
  /** 1-indexed; the snippet shows exactly lines start_line..end_line. */
  start_line: number;
  end_line: number;
  score: number;
  snippet: string;
  source: Source;
  explain?: Record<string, unknown>;
  /** The owner agent of a memory granted to this one; absent for its own files. */
  owner?: string;
}

export interface SearchResponse {
  results: SearchResult[];
  mode: string;
  pending: number;
  took_ms: number;
  /** Says plainly when nothing was found, or when indexing is still running. */
  message: string;
}

export interface ToolDefinitionsResponse {
  format: ToolFormat;
  tools: Record<string, unknown>[];
}

export interface ToolResult {
  /** Text for the model, citing path#Lstart-Lend. */
  content: string;
  /** The same answer as JSON. */
  data: Record<string, unknown>;
}
