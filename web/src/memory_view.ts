// What the Memory tab's views share: their addresses (the tab keeps its state in the URL:
// `?q=` a search, `?path=` a file, `&at=` the snapshot whose change to it is shown) and how a
// failed call is shown.
import { ApiError, message } from "./api";
import { DUPLICATE_SESSION_COOKIE } from "./cookie_conflict";
import { h } from "./dom";
import { handleError } from "./nav";

export interface MemoryPlace {
  /** The search typed, kept while a file found by it is open ("Results" leads back). */
  q?: string;
  /** A file below `/memory` (`entities/alice.md`). */
  path?: string;
  /** The snapshot whose change to `path` is open in its history. */
  at?: string;
}

/** `#/boxes/<box>/memory?…`; `(` and `)` encoded too, so it can stand in a markdown link. */
export function memoryHash(box: string, place: MemoryPlace = {}): string {
  const params = new URLSearchParams();
  if (place.q) params.set("q", place.q);
  if (place.path) params.set("path", place.path);
  if (place.at) params.set("at", place.at);
  const query = params.toString().replace(/\(/g, "%28").replace(/\)/g, "%29");
  return `#/boxes/${encodeURIComponent(box)}/memory${query ? `?${query}` : ""}`;
}

/** Keeps the address in step with what is shown, without a new history entry or a new
 * render (typing a search, opening a snapshot). */
export function replacePlace(box: string, place: MemoryPlace): void {
  history.replaceState(null, "", memoryHash(box, place));
}

/** The line that says what failed, with berth's message. A lost session is the app's
 * business (sign-in, the two-cookie screen), not this line's. */
export function failure(err: unknown): HTMLElement {
  if (err instanceof ApiError && (err.status === 401 || err.code === DUPLICATE_SESSION_COOKIE)) handleError(err);
  return h("p", { class: "error", role: "alert" }, message(err));
}

export const NO_MEMORY_YET = "No memory yet: it is made at the box's first start.";

export function size(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}
