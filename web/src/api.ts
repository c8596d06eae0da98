// Calls to berth's API with the session cookie (docs/api.md). Errors become ApiError with
// the server's code and message.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface BoxView {
  id: string;
  name: string;
  template: string;
  state: "stopped" | "starting" | "running" | "stopping" | "paused" | "snapshotted" | "failed";
  state_reason: string | null;
  created_at: string;
  /** The box's newest event that is not a state change; null before any. */
  last_activity_at: string | null;
  runtime: string;
}

export interface Template {
  name: string;
  harness: unknown | null;
  unavailable: string | null;
}

export interface Session {
  id: string;
  tenant: string;
  device: string | null;
  created_at: string;
}

export interface BerthEvent {
  seq: number;
  type: string;
  data: unknown;
  created_at: string;
}

export interface FileEntry {
  name: string;
  kind: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime: string | number;
}

async function errorOf(response: Response): Promise<ApiError> {
  try {
    const body = (await response.json()) as { error?: { code?: string; message?: string } };
    return new ApiError(response.status, body.error?.code ?? "unknown", body.error?.message ?? response.statusText);
  } catch {
    return new ApiError(response.status, "unknown", `${response.status} ${response.statusText}`);
  }
}

/** A call whose answer is JSON (or nothing, for 204). */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, credentials: "same-origin", headers: {} };
  if (body !== undefined) {
    init.headers = { "content-type": "application/json" };
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  if (!response.ok) throw await errorOf(response);
  if (response.status === 204 || response.headers.get("content-length") === "0") return undefined as T;
  return (await response.json()) as T;
}

/** A call whose answer is bytes. */
export async function apiBytes(path: string): Promise<ArrayBuffer> {
  const response = await fetch(path, { credentials: "same-origin" });
  if (!response.ok) throw await errorOf(response);
  return response.arrayBuffer();
}

export async function apiPut(path: string, body: BodyInit): Promise<void> {
  const response = await fetch(path, { method: "PUT", credentials: "same-origin", body });
  if (!response.ok) throw await errorOf(response);
}

export function boxPath(name: string, rest = ""): string {
  return `/v1/boxes/${encodeURIComponent(name)}${rest}`;
}

export function message(err: unknown): string {
  if (err instanceof ApiError) return err.message;
  if (err instanceof TypeError) return "Cannot reach berth: check your connection.";
  return err instanceof Error ? err.message : String(err);
}
