// The Memory tab's first view: a search field that searches as one types (debounced, the
// stale request aborted), its hits with the matched words marked, and the memory's files
// while the field is empty. Everything the box wrote is put in as text, never as HTML.
import { clear, h } from "./dom";
import * as memory from "./memory_api";
import { failure, memoryHash, NO_MEMORY_YET, replacePlace, size } from "./memory_view";

/** Quiet time after a keystroke before the search is sent. */
const DEBOUNCE_MS = 250;

export function browseView(root: HTMLElement, box: string, initial: string): () => void {
  let closed = false;
  let timer: number | undefined;
  let inFlight: AbortController | null = null;
  // Each search or listing shown gets a number: an answer to an older one is dropped.
  let shown = 0;
  let tree: Promise<memory.MemoryTree> | null = null;

  const field = h("input", {
    type: "search",
    id: "memory-q",
    name: "q",
    placeholder: "Search memory",
    autocomplete: "off",
    autocapitalize: "off",
    spellcheck: "false",
    enterkeyhint: "search",
  });
  field.value = initial;
  const status = h("p", { class: "memory-status muted", role: "status" });
  const body = h("div", { class: "memory-body" });
  const form = h(
    "form",
    { class: "memory-search", role: "search", onsubmit: (e: Event) => {
        e.preventDefault();
        run();
      } },
    h("label", { for: "memory-q", class: "visually-hidden" }, "Search memory"),
    field,
  );
  field.addEventListener("input", () => {
    window.clearTimeout(timer);
    replacePlace(box, { q: field.value.trim() });
    timer = window.setTimeout(run, DEBOUNCE_MS);
  });
  root.append(form, status, body);

  function run(): void {
    window.clearTimeout(timer);
    inFlight?.abort();
    inFlight = null;
    const q = field.value.trim();
    const mine = ++shown;
    const current = (): boolean => !closed && mine === shown;
    if (!q) {
      status.textContent = "";
      tree ??= memory.tree(box);
      tree.then(
        (t) => current() && showTree(body, status, box, t),
        (err: unknown) => {
          tree = null; // asked again next time
          if (current()) clear(body, failure(err));
        },
      );
      return;
    }
    const abort = new AbortController();
    inFlight = abort;
    body.setAttribute("aria-busy", "true");
    memory
      .search(box, q, abort.signal)
      .then((results) => current() && showHits(body, status, box, q, results))
      .catch((err: unknown) => {
        if (!current() || abort.signal.aborted) return;
        status.textContent = "";
        clear(body, failure(err));
      })
      .finally(() => current() && body.removeAttribute("aria-busy"));
  }

  run();
  return () => {
    closed = true;
    window.clearTimeout(timer);
    inFlight?.abort();
  };
}

function showTree(body: HTMLElement, status: HTMLElement, box: string, tree: memory.MemoryTree): void {
  if (tree.entries.length === 0) {
    clear(body, h("p", { class: "muted memory-empty" }, NO_MEMORY_YET));
    return;
  }
  const files = tree.entries.filter((e) => e.kind === "file").length;
  status.textContent = `${files} ${files === 1 ? "file" : "files"}`;
  clear(
    body,
    h(
      "ul",
      { class: "entries memory-tree", "aria-label": "Memory files" },
      tree.entries.map((e) => treeRow(box, e)),
    ),
    tree.truncated ? h("p", { class: "hint" }, "The memory is larger than one listing: this is its start.") : null,
  );
}

function treeRow(box: string, entry: memory.MemoryEntry): HTMLElement {
  const parts = entry.path.split("/");
  const name = parts[parts.length - 1] ?? entry.path;
  const depth = Math.min(parts.length - 1, 6);
  let row: HTMLElement;
  if (entry.kind === "file") {
    row = h(
      "li",
      null,
      // Named by its whole path: the indent that shows its folder is not read out.
      h("a", { href: memoryHash(box, { path: entry.path }), "aria-label": entry.path }, h("span", { class: "kind kind-file", "aria-hidden": "true" }), name),
      h("span", { class: "muted" }, size(entry.size)),
    );
  } else if (entry.kind === "dir") {
    row = h("li", { class: "memory-dir" }, h("span", { class: "kind kind-dir", "aria-hidden": "true" }), `${name}/`);
  } else {
    // A symlink or a special file: listed, not opened (the API never follows one).
    row = h("li", { class: "memory-other" }, h("span", { class: "kind kind-file", "aria-hidden": "true" }), name, entry.target ? h("span", { class: "muted" }, ` → ${entry.target}`) : null);
  }
  row.style.setProperty("--depth", String(depth));
  return row;
}

function showHits(body: HTMLElement, status: HTMLElement, box: string, q: string, results: memory.SearchResults): void {
  if (results.indexed_files === 0) {
    status.textContent = "";
    clear(body, h("p", { class: "muted memory-empty" }, NO_MEMORY_YET));
    return;
  }
  const n = results.hits.length;
  status.textContent = n === 0 ? "" : `${n} ${n === 1 ? "file matches" : "files match"} (${results.indexed_files} searched)`;
  if (n === 0) {
    clear(body, h("p", { class: "muted memory-empty" }, `No file matches “${q}”.`));
    return;
  }
  clear(
    body,
    h(
      "ol",
      { class: "memory-hits", "aria-label": "Search results" },
      results.hits.map((hit) =>
        h(
          "li",
          null,
          h(
            "a",
            { href: memoryHash(box, { path: hit.path, q }) },
            h("span", { class: "hit-path" }, hit.path),
            h("span", { class: "hit-snippet" }, marked(hit.snippet, hit.highlights)),
          ),
        ),
      ),
    ),
  );
}

/** UTF-8 length of one code point (a lone surrogate is written as U+FFFD: 3 bytes). */
function utf8Length(codePoint: number): number {
  return codePoint < 0x80 ? 1 : codePoint < 0x800 ? 2 : codePoint < 0x10000 ? 3 : 4;
}

/**
 * `snippet` as text and `<mark>` nodes. The ranges are byte offsets into the snippet's
 * UTF-8, `[start, end)`; each is moved to the code points around it (never splitting one),
 * clipped to the snippet, and overlapping ones are merged.
 */
export function marked(snippet: string, ranges: number[][]): (string | HTMLElement)[] {
  // byteAt[k] is the byte offset of the k-th code point boundary, indexAt[k] its index in
  // the JS string (UTF-16 units).
  const byteAt: number[] = [];
  const indexAt: number[] = [];
  let bytes = 0;
  let index = 0;
  for (const ch of snippet) {
    byteAt.push(bytes);
    indexAt.push(index);
    bytes += utf8Length(ch.codePointAt(0) ?? 0);
    index += ch.length;
  }
  byteAt.push(bytes);
  indexAt.push(index);
  // The first boundary at or after byte `b`.
  const toIndex = (b: number): number => {
    let lo = 0;
    let hi = byteAt.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (byteAt[mid]! < b) lo = mid + 1;
      else hi = mid;
    }
    return indexAt[lo]!;
  };
  const clip = (b: number): number => Math.max(0, Math.min(bytes, b));
  const spans = ranges
    .filter((r): r is [number, number] => r.length >= 2 && Number.isFinite(r[0]) && Number.isFinite(r[1]))
    .map(([start, end]) => [toIndex(clip(start)), toIndex(clip(end))] as const)
    .filter(([start, end]) => end > start)
    .sort((a, b) => a[0] - b[0]);
  const out: (string | HTMLElement)[] = [];
  let at = 0;
  for (const [start, end] of spans) {
    if (end <= at) continue;
    const from = Math.max(start, at);
    if (from > at) out.push(snippet.slice(at, from));
    out.push(h("mark", null, snippet.slice(from, end)));
    at = end;
  }
  if (at < snippet.length) out.push(snippet.slice(at));
  return out;
}
