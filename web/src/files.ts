// Files: browse /home/user and /memory, view markdown rendered (with [[links]] followed) and
// text as text, edit and save text, upload and download.
import { api, apiBytes, apiPut, boxPath, message, type FileEntry } from "./api";
import type { BoxContext } from "./box_context";
import { clear, h } from "./dom";
import { renderMarkdown, wikiLinks } from "./markdown";
import { go, handleError } from "./nav";

const ROOTS = ["/home/user", "/memory"];
const MAX_VIEW_BYTES = 2 * 1024 * 1024;

function join(dir: string, name: string): string {
  return dir.endsWith("/") ? dir + name : `${dir}/${name}`;
}

function parent(path: string): string {
  const i = path.replace(/\/+$/, "").lastIndexOf("/");
  return i <= 0 ? "/" : path.slice(0, i);
}

function filesHash(box: string, path: string): string {
  return `#/boxes/${encodeURIComponent(box)}/files?path=${encodeURIComponent(path)}`;
}

function size(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function filesPanel(root: HTMLElement, ctx: BoxContext, path: string): () => void {
  let closed = false;
  const body = h("div", { class: "files-body" }, h("p", { class: "muted" }, "Loading…"));
  root.append(
    h(
      "div",
      { class: "files-head" },
      h("div", { class: "roots" }, ROOTS.map((r) => h("a", { href: filesHash(ctx.name, r), class: path.startsWith(r) ? "chip current" : "chip", "aria-current": path === r ? "page" : null }, r))),
      h("p", { class: "crumb" }, path),
    ),
    body,
  );
  api<FileEntry>("GET", boxPath(ctx.name, `/files/stat?path=${encodeURIComponent(path)}`))
    .then((stat) => {
      if (closed) return;
      if (stat.kind === "dir") return showDir(body, ctx.name, path);
      return showFile(body, ctx.name, path, stat);
    })
    .catch((err: unknown) => {
      if (closed) return;
      clear(body, h("p", { class: "error", role: "alert" }, message(err)));
      handleError(err);
    });
  return () => {
    closed = true;
  };
}

async function showDir(body: HTMLElement, box: string, path: string): Promise<void> {
  const { entries } = await api<{ entries: FileEntry[] }>("GET", boxPath(box, `/files/list?path=${encodeURIComponent(path)}`));
  entries.sort((a, b) => Number(b.kind === "dir") - Number(a.kind === "dir") || a.name.localeCompare(b.name));
  const upload = h("input", { type: "file", id: "upload", class: "visually-hidden", multiple: true });
  const status = h("p", { class: "muted", "aria-live": "polite" });
  upload.addEventListener("change", () => {
    const chosen = [...(upload.files ?? [])];
    void (async () => {
      for (const file of chosen) {
        status.textContent = `Uploading ${file.name}…`;
        try {
          await apiPut(boxPath(box, `/files?path=${encodeURIComponent(join(path, file.name))}`), file);
        } catch (err) {
          status.textContent = `${file.name}: ${message(err)}`;
          return;
        }
      }
      status.textContent = "";
      go(filesHash(box, path), true);
    })();
  });
  clear(
    body,
    h(
      "div",
      { class: "files-actions" },
      // The roots are the top: the app browses the box's own folders, not its system.
      ROOTS.includes(path) ? null : h("a", { href: filesHash(box, parent(path)), class: "button" }, "Up"),
      h("label", { for: "upload", class: "button" }, "Upload"),
      upload,
    ),
    status,
    entries.length === 0
      ? h("p", { class: "muted" }, "This folder is empty.")
      : h(
          "ul",
          { class: "entries", "aria-label": `Files in ${path}` },
          entries.map((e) =>
            h(
              "li",
              null,
              h("a", { href: filesHash(box, join(path, e.name)) }, h("span", { class: `kind kind-${e.kind === "dir" ? "dir" : "file"}`, "aria-hidden": "true" }), e.kind === "dir" ? `${e.name}/` : e.name),
              e.kind === "file" ? h("span", { class: "muted" }, size(e.size)) : null,
            ),
          ),
        ),
  );
}

function looksText(bytes: Uint8Array): string | null {
  if (bytes.includes(0)) return null;
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return null;
  }
}

async function showFile(body: HTMLElement, box: string, path: string, stat: FileEntry): Promise<void> {
  const url = boxPath(box, `/files?path=${encodeURIComponent(path)}`);
  const name = path.slice(path.lastIndexOf("/") + 1);
  const download = h("a", { href: url, download: name, class: "button" }, "Download");
  const up = h("a", { href: filesHash(box, parent(path)), class: "button" }, "Up");
  if (stat.size > MAX_VIEW_BYTES) {
    clear(body, h("div", { class: "files-actions" }, up, download), h("p", { class: "muted" }, `${name} is ${size(stat.size)}: too large to show here.`));
    return;
  }
  const text = looksText(new Uint8Array(await apiBytes(url)));
  if (text === null) {
    clear(body, h("div", { class: "files-actions" }, up, download), h("p", { class: "muted" }, `${name} is not text.`));
    return;
  }
  const view = (): void => {
    const edit = h("button", { type: "button", onclick: () => editor() }, "Edit");
    clear(
      body,
      h("div", { class: "files-actions" }, up, edit, download),
      /\.(md|markdown)$/i.test(name) ? h("div", { class: "file-view" }, renderMarkdown(current, wikiLinks(box))) : h("pre", { class: "file-view" }, current),
    );
  };
  const editor = (): void => {
    const area = h("textarea", { id: "file-text", class: "file-edit", spellcheck: "false" });
    area.value = current;
    const error = h("p", { class: "error", role: "alert", hidden: true });
    const save = h("button", { type: "button", class: "primary" }, "Save");
    save.addEventListener("click", () => {
      save.disabled = true;
      apiPut(url, area.value)
        .then(() => {
          current = area.value;
          view();
        })
        .catch((err: unknown) => {
          error.textContent = message(err);
          error.hidden = false;
          save.disabled = false;
        });
    });
    clear(
      body,
      h("div", { class: "files-actions" }, h("button", { type: "button", onclick: view }, "Cancel"), save),
      h("label", { for: "file-text", class: "visually-hidden" }, `Contents of ${name}`),
      area,
      error,
    );
    area.focus();
  };
  let current = text;
  view();
}
