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

// Links in what an agent wrote (or what reached it: a prompt injection) lead out of berth
// or to a box's screen, never to another of the app's routes nor to berth's own paths: a
// tapped `#/pair/<code>` would sign the browser in to the writer's tenant (login CSRF), and
// a same-origin path is a request with the session cookie.
const LINK_OUT = /^(https?:|mailto:)/i;
/** The fragments wikiLinks and the Memory tab write: a box's screen (`parseRoute`'s "box"). */
const BOX_ROUTE = /^#\/boxes\/[^/?#]/;

function safeHref(href: string): boolean {
  if (BOX_ROUTE.test(href)) return true;
  if (!LINK_OUT.test(href)) return false;
  // berth's own address by its full URL is the app too (opened in a new tab): its fragment
  // is a route, held to the same rule. A port's share link by path (no fragment) stays.
  try {
    const url = new URL(href, location.href);
    return url.hostname !== location.hostname || url.hash === "" || BOX_ROUTE.test(url.hash);
  } catch {
    return false;
  }
}

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = (node.getAttribute("href") ?? "").trim();
    if (!safeHref(href)) {
      node.removeAttribute("href");
    } else if (/^https?:/i.test(href)) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  }
  if (node.tagName === "IMG") {
    // A picture is a request nobody tapped: from elsewhere it tells a third party that the
    // message was read; from berth it carries the session cookie (a file read wakes a box,
    // a port's page by path reaches that box's app). Only pictures in the text itself.
    const src = node.getAttribute("src") ?? "";
    if (!/^data:image\//i.test(src.trim())) node.removeAttribute("src");
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
