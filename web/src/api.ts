// Calls to berth's API with the session cookie (docs/api.md). Errors become ApiError with
// the server's code and message. The types are generated from openapi.json
// (`npm run api-types`); a test fails when they drift.

import type { components } from "./generated/api_types";

type Schemas = components["schemas"];
export type BoxView = Schemas["BoxView"];
export type BoxState = Schemas["BoxState"];
export type Template = Schemas["TemplateView"];
export type Session = Schemas["WebSessionView"];
export type BerthEvent = Schemas["EventView"];
export type FileEntry = Schemas["FileEntry"];
export type ErrorCode = Schemas["ErrorCode"];
export type ServerControl = Schemas["ServerControl"];
export type ClientControl = Schemas["ClientControl"];
export { eventTypeValues as EVENT_TYPES } from "./generated/api_types";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

async function errorOf(response: Response): Promise<ApiError> {
  try {
    const body = (await response.json()) as Partial<Schemas["ErrorBody"]>;
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
