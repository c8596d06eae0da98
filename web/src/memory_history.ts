// A memory file's history: the box's memory snapshots, newest first; opening one shows what
// it changed in this file (the diff from the snapshot before it) and offers to bring this
// version back. A restore wakes the box (its agent writes the file) and snapshots the
// memory as it stands first, which the answer names.
import { api, ApiError, boxPath, message, type BoxView } from "./api";
import type { BoxContext } from "./box_context";
import { clear, h } from "./dom";
import * as memory from "./memory_api";
import { failure, replacePlace, size, type MemoryPlace } from "./memory_view";

/** Lines of a diff put in the page; the rest is said, not shown. */
const MAX_DIFF_LINES = 4000;

const REASONS: Record<memory.MemorySnapshot["reason"], string> = {
  stop: "when the box stopped",
  request: "on request",
  before_restore: "before a restore",
};

/** What one snapshot did to the file. */
type Change =
  | { kind: "changed"; change: memory.MemoryChange }
  | { kind: "first"; text: string | null }
  | { kind: "same" }
  | { kind: "absent" };

export function historySection(root: HTMLElement, ctx: BoxContext, place: MemoryPlace & { path: string }, onRestored: () => void): () => void {
  const box = ctx.name;
  const { path } = place;
  let closed = false;
  let open: string | null = place.at ?? null;
  const items = new Map<string, { button: HTMLButtonElement; detail: HTMLElement; load: () => void }>();
  const restored = h("p", { class: "memory-restored", role: "status", tabindex: -1, hidden: true });
  const list = h("div", null, h("p", { class: "muted" }, "Loading…"));
  root.append(restored, list);

  const toggle = (id: string): void => {
    const was = open;
    open = was === id ? null : id;
    for (const [key, item] of items) {
      const shown = key === open;
      item.button.setAttribute("aria-expanded", String(shown));
      item.detail.hidden = !shown;
      if (shown) item.load();
    }
    replacePlace(box, { ...place, at: open ?? undefined });
  };

  const showList = (snapshots: memory.MemorySnapshot[]): void => {
    items.clear();
    if (snapshots.length === 0) {
      clear(list, h("p", { class: "muted" }, "No snapshots yet: one is taken each time the box stops with its memory changed."));
      return;
    }
    const rows = snapshots.map((snap, i) => {
      const before = i > 0 ? snapshots[i - 1]! : null;
      const detail = h("div", { class: "snapshot-detail", id: `snapshot-${snap.id}`, hidden: true });
      const button = h(
        "button",
        { type: "button", class: "snapshot", "aria-expanded": "false", "aria-controls": detail.id, onclick: () => toggle(snap.id) },
        h("span", { class: "snapshot-when" }, when(snap.taken_at)),
        h("span", { class: "snapshot-why" }, REASONS[snap.reason]),
      );
      let loaded = false;
      const load = (): void => {
        if (loaded) return;
        loaded = true;
        clear(detail, h("p", { class: "muted" }, "Loading…"));
        changeIn(box, path, snap, before)
          .then((change) => !closed && clear(detail, changeView(change), restoreButton(change, snap)))
          .catch((err: unknown) => {
            loaded = false;
            if (!closed) clear(detail, failure(err));
          });
      };
      items.set(snap.id, { button, detail, load });
      return h("li", null, button, detail);
    });
    clear(list, h("ul", { class: "snapshots", "aria-label": "Snapshots of the memory, newest first" }, rows.reverse()));
    if (open && items.has(open)) {
      const id = open;
      open = null;
      toggle(id);
    } else {
      open = null;
    }
  };

  const restoreButton = (change: Change, snap: memory.MemorySnapshot): HTMLElement | null => {
    if (change.kind === "absent") return null;
    return h("div", { class: "files-actions" }, h("button", { type: "button", onclick: () => confirmRestore(snap) }, "Restore this version"));
  };

  const confirmRestore = (snap: memory.MemorySnapshot): void => {
    const error = h("p", { class: "error", role: "alert", hidden: true });
    const confirm = h("button", { type: "button", class: "primary" }, "Restore");
    const dialog = h(
      "dialog",
      { "aria-labelledby": "restore-title" },
      h(
        "div",
        { class: "dialog-form" },
        h("h2", { id: "restore-title" }, "Restore this version?"),
        h("p", { class: "memory-path-inline" }, path),
        h("p", null, `It is brought back as it was at ${when(snap.taken_at)}. The box wakes to write it; the memory as it is now is kept as a snapshot first.`),
        error,
        h("div", { class: "dialog-actions" }, h("button", { type: "button", onclick: () => dialog.close() }, "Cancel"), confirm),
      ),
    );
    confirm.addEventListener("click", () => {
      confirm.disabled = true;
      memory
        .restore(box, snap.id, path)
        .then((done) => {
          dialog.close();
          if (closed) return;
          restored.textContent = `Restored; the version before is kept as snapshot ${done.before.id}`;
          restored.hidden = false;
          restored.focus();
          open = null;
          onRestored();
          loadList();
          // The restore woke the box: the header says so.
          api<BoxView>("GET", boxPath(box))
            .then((b) => !closed && ctx.setState(b.state, b.state_reason ?? null))
            .catch(() => {});
        })
        .catch((err: unknown) => {
          error.textContent = message(err);
          error.hidden = false;
          confirm.disabled = false;
        });
    });
    dialog.addEventListener("close", () => dialog.remove());
    root.append(dialog);
    dialog.showModal();
  };

  const loadList = (): void => {
    memory.snapshots(box).then(
      (snapshots) => !closed && showList(snapshots),
      (err: unknown) => !closed && clear(list, failure(err)),
    );
  };
  loadList();
  return () => {
    closed = true;
  };
}

/** What `snap` did to `path`: its diff from the snapshot `before`, or for the first one, the
 * file as it holds it. */
async function changeIn(box: string, path: string, snap: memory.MemorySnapshot, before: memory.MemorySnapshot | null): Promise<Change> {
  if (!before) {
    try {
      return { kind: "first", text: memory.asText(await memory.snapshotFile(box, snap.id, path)) };
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) return { kind: "absent" };
      throw err;
    }
  }
  const diff = await memory.diff(box, before.id, snap.id, path);
  const change = diff.changes.find((c) => c.path === path);
  if (!change) return { kind: "same" };
  if (change.change === "removed") return { kind: "absent" };
  return { kind: "changed", change };
}

function changeView(change: Change): (HTMLElement | null)[] {
  switch (change.kind) {
    case "same":
      return [h("p", { class: "muted" }, "This file did not change in this snapshot.")];
    case "absent":
      return [h("p", { class: "muted" }, "This snapshot does not hold this file.")];
    case "first":
      return [
        h("p", { class: "muted" }, "The oldest snapshot: the file as it holds it."),
        change.text === null ? h("p", { class: "muted" }, "The file is not text.") : diffView(change.text.replace(/\n$/, "").split("\n").map((l) => `+${l}`)),
      ];
    case "changed": {
      const { change: c } = change;
      const sizes = c.size_before != null && c.size_after != null ? `: ${size(c.size_before)} → ${size(c.size_after)}` : "";
      const said = c.change === "added" ? "Added in this snapshot" : `Changed in this snapshot${sizes}`;
      return [
        h("p", { class: "muted" }, said),
        c.patch ? diffView(patchLines(c.patch)) : h("p", { class: "muted" }, "The versions are not text, or too large to compare here."),
      ];
    }
  }
}

/** A unified diff's lines without its `---`/`+++` header (the file is named above). */
function patchLines(patch: string): string[] {
  const lines = patch.replace(/\n$/, "").split("\n");
  let start = 0;
  while (start < lines.length && /^(---|\+\+\+) /.test(lines[start]!)) start++;
  return lines.slice(start);
}

/** The lines of a diff, added and removed ones coloured (and marked `+`/`-` for anyone who
 * cannot see the colours). */
function diffView(lines: string[]): HTMLElement {
  const shown = lines.slice(0, MAX_DIFF_LINES).map((line) => {
    const kind = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("\\") ? "note" : "same";
    return h("span", { class: `diff-line diff-${kind}` }, line || " ");
  });
  const more = lines.length - shown.length;
  return h(
    "div",
    null,
    h("pre", { class: "diff", tabindex: 0, "aria-label": "Changes to the file" }, h("code", null, shown)),
    more > 0 ? h("p", { class: "hint" }, `${more} more lines not shown.`) : null,
  );
}

/** "5 Dec, 14:02:11": snapshots are often minutes apart. */
function when(iso: string): string {
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const thisYear = date.getFullYear() === new Date().getFullYear();
  return date.toLocaleString(undefined, { day: "numeric", month: "short", year: thisYear ? undefined : "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}
