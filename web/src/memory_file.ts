// One file of the memory: its markdown rendered (each `[[link]]` leads to the file berth
// resolves it to, a link to a file not written yet is marked as such), the files that link
// to it, and its history. The file is the agent's writing: it goes through the app's
// markdown renderer (raw HTML as text, DOMPurify) and pictures load only from `data:`.
import type { BoxContext } from "./box_context";
import { clear, h } from "./dom";
import { renderMarkdown } from "./markdown";
import * as memory from "./memory_api";
import { historySection } from "./memory_history";
import { failure, memoryHash, size, type MemoryPlace } from "./memory_view";

const MAX_VIEW_BYTES = 2 * 1024 * 1024;

/** `[[target]]` and `[[target|label]]`, as berth's link index reads them. */
const WIKI_LINK = /\[\[([^\]|\n]+)(?:\|([^\]\n]+))?\]\]/g;

/** Fenced code blocks and inline code spans: their `[[…]]` are text, not links. */
const CODE = /(^ {0,3}(?:```|~~~)[^\n]*\n[\s\S]*?(?:^ {0,3}(?:```|~~~)[ \t]*$|(?![\s\S]))|`[^`\n]+`)/m;

export function fileView(root: HTMLElement, ctx: BoxContext, place: MemoryPlace & { path: string }): () => void {
  const box = ctx.name;
  const { path } = place;
  let closed = false;
  const content = h("div", { class: "memory-content" }, h("p", { class: "muted" }, "Loading…"));
  const backlinks = h("div", { class: "memory-backlinks" });
  const history = h("div", { class: "memory-history" });
  root.append(
    h(
      "div",
      { class: "memory-file-head" },
      h("a", { href: memoryHash(box, place.q ? { q: place.q } : {}), class: "button" }, place.q ? "‹ Results" : "‹ All files"),
      h("h2", { class: "memory-path" }, path),
    ),
    content,
    h("section", { class: "memory-section", "aria-labelledby": "memory-backlinks-title" }, h("h3", { id: "memory-backlinks-title" }, "Backlinks"), backlinks),
    h("section", { class: "memory-section", "aria-labelledby": "memory-history-title" }, h("h3", { id: "memory-history-title" }, "History"), history),
  );

  const load = (): void => {
    void Promise.allSettled([memory.file(box, path), memory.links(box, path)]).then(([file, links]) => {
      if (closed) return;
      const known = links.status === "fulfilled" ? links.value : null;
      // Without its links the file is still shown, its [[links]] as written.
      clear(content, file.status === "fulfilled" ? fileContent(box, path, file.value, known) : failure(file.reason));
      if (known) clear(backlinks, backlinkList(box, known.backlinks));
      else if (file.status === "fulfilled") clear(backlinks, failure(links.status === "rejected" ? links.reason : null));
      else clear(backlinks, h("p", { class: "muted" }, "None."));
    });
  };
  load();
  const stopHistory = historySection(history, ctx, place, load);
  return () => {
    closed = true;
    stopHistory();
  };
}

function fileContent(box: string, path: string, bytes: ArrayBuffer, links: memory.MemoryLinks | null): HTMLElement {
  if (bytes.byteLength > MAX_VIEW_BYTES) return h("p", { class: "muted" }, `This file is ${size(bytes.byteLength)}: too large to show here.`);
  const text = memory.asText(bytes);
  if (text === null) return h("p", { class: "muted" }, "This file is not text.");
  if (!/\.(md|markdown)$/i.test(path)) return h("pre", { class: "file-view" }, text);
  const outgoing = new Map((links?.outgoing ?? []).map((l) => [l.text.trim(), l]));
  const missing = new Set<string>();
  const rendered = renderMarkdown(text, (md) => withLinks(md, box, outgoing, missing));
  markMissing(rendered, missing);
  return h("div", { class: "file-view" }, rendered);
}

/** Each `[[…]]` outside code as a markdown link to its file's view; those berth does not
 * resolve are left as written. The targets not written yet are put in `missing`. */
function withLinks(md: string, box: string, outgoing: Map<string, memory.MemoryLink>, missing: Set<string>): string {
  return md
    .split(CODE)
    .map((part, i) =>
      i % 2 === 1
        ? part
        : part.replace(WIKI_LINK, (all, target: string, label?: string) => {
            const link = outgoing.get(target.trim());
            if (!link) return all;
            if (!link.exists) missing.add(link.target);
            // Every punctuation mark escaped: the label is text, never markdown.
            const text = (label ?? target).trim().replace(/[!-/:-@[-`{-~]/g, "\\$&");
            return `[${text}](${memoryHash(box, { path: link.target })})`;
          }),
    )
    .join("");
}

/** A link to a file not written yet becomes text marked as such: there is nothing to open. */
function markMissing(rendered: HTMLElement, missing: Set<string>): void {
  if (missing.size === 0) return;
  for (const a of rendered.querySelectorAll<HTMLAnchorElement>("a[href^='#/boxes/']")) {
    const query = a.getAttribute("href")?.split("?", 2)[1] ?? "";
    const target = new URLSearchParams(query).get("path");
    if (target === null || !missing.has(target)) continue;
    const span = h("span", { class: "wikilink-missing", title: `${target} is not written yet` });
    span.append(...a.childNodes, h("span", { class: "visually-hidden" }, " (not written yet)"));
    a.replaceWith(span);
  }
}

function backlinkList(box: string, paths: string[]): HTMLElement {
  if (paths.length === 0) return h("p", { class: "muted" }, "No file links here.");
  return h(
    "ul",
    { class: "entries", "aria-label": "Files that link here" },
    paths.map((p) => h("li", null, h("a", { href: memoryHash(box, { path: p }) }, h("span", { class: "kind kind-file", "aria-hidden": "true" }), p))),
  );
}
