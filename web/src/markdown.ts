// Markdown to safe DOM: marked renders, DOMPurify removes everything that could run or
// leave the page unasked (scripts, handlers, javascript: links, forms, frames).
import DOMPurify from "dompurify";
import { marked } from "marked";

// Raw HTML in markdown is shown as text, never parsed: even an inert parse of
// `<img onerror=…>` makes Chrome report a CSP violation, and an agent's answer has no need
// for HTML. DOMPurify still cleans what marked itself writes (links, images).
const escapeHtml = (text: string): string =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] ?? c);
marked.use({ renderer: { html: ({ text }) => escapeHtml(text) } });

const SAFE_SCHEME = /^(https?:|mailto:|#|\/(?!\/))/i;

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") ?? "";
    if (!SAFE_SCHEME.test(href.trim())) {
      node.removeAttribute("href");
    } else if (/^https?:/i.test(href.trim())) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  }
  if (node.tagName === "IMG") {
    // Pictures from elsewhere would tell a third party that the message was read.
    const src = node.getAttribute("src") ?? "";
    if (!/^(data:image\/|blob:|\/(?!\/))/i.test(src)) node.removeAttribute("src");
  }
});

const PURIFY: import("dompurify").Config & { RETURN_DOM_FRAGMENT: true } = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed"],
  FORBID_ATTR: ["style"],
  RETURN_DOM_FRAGMENT: true,
};

/** Renders markdown into a fresh element of class `md`. */
export function renderMarkdown(text: string, transform?: (md: string) => string): HTMLElement {
  const html = marked.parse(transform ? transform(text) : text, { async: false, gfm: true, breaks: true });
  const el = document.createElement("div");
  el.className = "md";
  el.append(DOMPurify.sanitize(html, PURIFY));
  return el;
}

/** `[[Name]]` and `[[Name|label]]` become links to `/memory/Name.md` in the Files tab. */
export function wikiLinks(box: string): (md: string) => string {
  return (md) =>
    md.replace(/\[\[([^\]|\n]+)(?:\|([^\]\n]+))?\]\]/g, (_all, target: string, label?: string) => {
      const name = target.trim();
      const file = /\.[a-z0-9]+$/i.test(name) ? name : `${name}.md`;
      const path = file.startsWith("/") ? file : `/memory/${file}`;
      const href = `#/boxes/${encodeURIComponent(box)}/files?path=${encodeURIComponent(path)}`;
      return `[${(label ?? name).replace(/[[\]]/g, "")}](${href})`;
    });
}
