// The Memory tab (`#/boxes/<name>/memory`): search the box's `/memory` as one types, read a
// file with its [[links]] and backlinks, see what each snapshot changed in it and bring a
// version back. Every call is a read that leaves a sleeping box asleep (memory_api.ts), but
// the restore, which says that it wakes the box.
import type { BoxContext } from "./box_context";
import { fileView } from "./memory_file";
import { browseView } from "./memory_search";

export function memoryPanel(root: HTMLElement, ctx: BoxContext, query: URLSearchParams): () => void {
  root.classList.add("memory");
  const q = query.get("q") ?? "";
  const path = query.get("path");
  if (path) return fileView(root, ctx, { path, q, at: query.get("at") ?? undefined });
  return browseView(root, ctx.name, q);
}
