// The memory API the Memory tab reads (docs/api.md "Memory"): every call here is a read
// that leaves a sleeping box asleep, but the restore, which wakes it to write the files.
// The tab calls nothing else of the box (never exec or files, which would wake it).
import { api, ApiError, apiBytes, boxPath, type ErrorCode } from "./api";
import type { components } from "./generated/api_types";

type Schemas = components["schemas"];
export type MemoryTree = Schemas["MemoryTree"];
export type MemoryEntry = Schemas["MemoryEntry"];
export type SearchResults = Schemas["MemorySearchResults"];
export type MemoryHit = Schemas["MemoryHit"];
export type MemoryLinks = Schemas["MemoryLinks"];
export type MemoryLink = Schemas["MemoryLink"];
export type MemorySnapshot = Schemas["MemorySnapshot"];
export type MemoryDiff = Schemas["MemoryDiff"];
export type MemoryChange = Schemas["MemoryChange"];
export type MemoryRestored = Schemas["MemoryRestored"];
type RestoreRequest = Schemas["RestoreRequest"];

/** Most hits a search asks for. */
const SEARCH_LIMIT = 30;

/** A path below `/memory` in a URL's path: each segment encoded, its `/`s kept. */
function pathSegments(path: string): string {
  return path.split("/").map(encodeURIComponent).join("/");
}

const query = (params: Record<string, string | undefined>): string => {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : "";
};

export const tree = (box: string): Promise<MemoryTree> => api("GET", boxPath(box, "/memory"));

export const file = (box: string, path: string): Promise<ArrayBuffer> => apiBytes(boxPath(box, `/memory/${pathSegments(path)}`));

export const links = (box: string, path: string): Promise<MemoryLinks> => api("GET", boxPath(box, `/memory/links${query({ path })}`));

export const snapshots = (box: string): Promise<MemorySnapshot[]> =>
  api<Schemas["MemorySnapshotList"]>("GET", boxPath(box, "/memory/snapshots")).then((list) => list.snapshots);

/** What changed in `path` from snapshot `from` to snapshot `to` (its `patch` when text). */
export const diff = (box: string, from: string, to: string, path: string): Promise<MemoryDiff> =>
  api("GET", boxPath(box, `/memory/snapshots/${encodeURIComponent(from)}/diff${query({ to, path })}`));

export const snapshotFile = (box: string, snapshot: string, path: string): Promise<ArrayBuffer> =>
  apiBytes(boxPath(box, `/memory/snapshots/${encodeURIComponent(snapshot)}/files/${pathSegments(path)}`));

/** Brings `path` back as `snapshot` holds it; wakes the box (its agent writes the file). */
export const restore = (box: string, snapshot: string, path: string): Promise<MemoryRestored> =>
  api("POST", boxPath(box, "/memory/restore"), { snapshot, path } satisfies RestoreRequest);

/**
 * A search that `signal` can cancel (a newer keystroke does). `api()` takes no signal, so
 * this one reads the error body itself, the same way.
 */
export async function search(box: string, q: string, signal: AbortSignal): Promise<SearchResults> {
  const response = await fetch(boxPath(box, `/memory/search${query({ q, limit: String(SEARCH_LIMIT) })}`), { credentials: "same-origin", signal });
  if (!response.ok) {
    const body = (await response.json().catch(() => null)) as Partial<Schemas["ErrorBody"]> | null;
    const code: ErrorCode = body?.error?.code ?? "unknown";
    throw new ApiError(response.status, code, body?.error?.message ?? `${response.status} ${response.statusText}`);
  }
  return (await response.json()) as SearchResults;
}

/** The UTF-8 text of a file, or null when it is not text. */
export function asText(bytes: ArrayBuffer): string | null {
  const view = new Uint8Array(bytes);
  if (view.includes(0)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(view);
  } catch {
    return null;
  }
}
