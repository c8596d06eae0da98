// One box: its name and state, Stop and Delete, and the Chat, Files, Memory and Terminal tabs,
// and Desktop for a box whose template runs a desktop (a `vnc` service).
import { api, boxPath, message, type BoxView, type Template } from "./api";
import { chatPanel } from "./chat";
import { clear, h } from "./dom";
import { filesPanel } from "./files";
import type { Route } from "./route";
import type { BoxContext } from "./box_context";
import { focusAfterNavigation, go, handleError } from "./nav";
import { stateLabel } from "./state";
import { hasDesktop } from "./templates";

const TABS = [
  ["chat", "Chat"],
  ["files", "Files"],
  ["memory", "Memory"],
  ["terminal", "Terminal"],
] as const;
const DESKTOP_TAB = ["desktop", "Desktop"] as const;
type Tab = readonly [string, string];

export function boxScreen(root: HTMLElement, route: Route): () => void {
  const name = route.box ?? "";
  const tab = route.tab ?? "chat";
  const stateEl = h("span", { class: "state" }, "");
  const ctx: BoxContext = {
    name,
    box: null,
    setState(state, reason) {
      if (ctx.box) ctx.box = { ...ctx.box, state, state_reason: reason };
      stateEl.className = `state state-${state}`;
      stateEl.textContent = stateLabel({ state, state_reason: reason });
    },
  };
  const stop = h("button", { type: "button", onclick: () => void stopBox(ctx, stop) }, "Stop");
  const del = h("button", { type: "button", class: "danger", onclick: () => confirmDelete(root, name) }, "Delete");
  const panel = h("section", { class: "panel", id: "panel", role: "tabpanel", "aria-labelledby": `tab-${tab}` });
  // Desktop joins the tabs once the box's template is known to have one (at once when it
  // is the tab asked for: the panel says so if it has none).
  const tabs: Tab[] = tab === "desktop" ? [...TABS, DESKTOP_TAB] : [...TABS];
  const tabEl = ([id, label]: Tab): HTMLAnchorElement =>
    h("a", { role: "tab", id: `tab-${id}`, href: tabHash(name, id), tabindex: id === tab ? 0 : -1, "aria-selected": String(id === tab), "aria-controls": "panel", class: id === tab ? "tab current" : "tab" }, label);
  const tabList = h("nav", { class: "tabs", role: "tablist", "aria-label": "Box views", onkeydown: (event: Event) => moveTab(event as KeyboardEvent, name, tab, tabs) }, tabs.map(tabEl));
  root.append(
    h(
      "div",
      { class: "box-head" },
      h("a", { href: "#/boxes", class: "back", "aria-label": "All boxes" }, "‹"),
      h("div", { class: "box-title" }, h("h1", null, name), stateEl),
      h("div", { class: "box-actions" }, stop, del),
    ),
    tabList,
    panel,
  );
  root.classList.add("box-screen");

  let closed = false;
  api<BoxView>("GET", boxPath(name))
    .then((box) => {
      if (closed) return;
      ctx.box = box;
      ctx.setState(box.state, box.state_reason ?? null);
      // The desktop tab is there already, and its panel asks itself.
      return tab === "desktop" ? undefined : api<{ templates: Template[] }>("GET", "/v1/templates");
    })
    .then((list) => {
      if (closed || !list || !hasDesktop(list.templates.find((t) => t.name === ctx.box?.template))) return;
      // Added, not redrawn: a tab that has the focus keeps it.
      tabs.push(DESKTOP_TAB);
      tabList.append(tabEl(DESKTOP_TAB));
    })
    .catch(handleError);

  let panelCleanup: () => void = () => {};
  /** A panel whose code is loaded only when its tab opens, so the app's shell stays small. */
  const loadPanel = (what: string, load: () => Promise<() => () => void>): void => {
    panel.append(h("p", { class: "muted" }, `Loading ${what}…`));
    load()
      .then((mount) => {
        if (closed) return;
        clear(panel);
        panelCleanup = mount();
      })
      .catch((err: unknown) => clear(panel, h("p", { class: "error", role: "alert" }, message(err))));
  };
  if (tab === "chat") {
    panelCleanup = chatPanel(panel, ctx);
  } else if (tab === "files") {
    panelCleanup = filesPanel(panel, ctx, route.query.get("path") ?? "/home/user");
  } else if (tab === "memory") {
    loadPanel("the memory", () => import("./memory").then((m) => () => m.memoryPanel(panel, ctx, route.query)));
  } else if (tab === "desktop") {
    // noVNC is loaded only here.
    loadPanel("the desktop", () => import("./desktop").then((m) => () => m.desktopPanel(panel, ctx)));
  } else {
    // xterm.js is loaded only here.
    loadPanel("the terminal", () => import("./terminal").then((m) => () => m.terminalPanel(panel, ctx)));
  }
  return () => {
    closed = true;
    root.classList.remove("box-screen");
    panelCleanup();
  };
}

function tabHash(name: string, tab: string): string {
  return `#/boxes/${encodeURIComponent(name)}/${tab}`;
}

/** The tab list's keys (WAI-ARIA tabs, activated as they are chosen): the arrows move to
 * the previous or next tab, Home and End to the first or last; the focus stays on the tab. */
function moveTab(event: KeyboardEvent, name: string, current: string, tabs: Tab[]): void {
  const ids = tabs.map(([id]) => id);
  const at = ids.indexOf(current);
  const to = { ArrowLeft: at - 1, ArrowRight: at + 1, Home: 0, End: ids.length - 1 }[event.key];
  if (to === undefined) return;
  event.preventDefault();
  const next = ids[(to + ids.length) % ids.length]!;
  if (next === current) return;
  focusAfterNavigation(`#tab-${next}`);
  go(tabHash(name, next));
}

async function stopBox(ctx: BoxContext, button: HTMLButtonElement): Promise<void> {
  button.disabled = true;
  try {
    const box = await api<BoxView>("POST", boxPath(ctx.name, "/stop"));
    ctx.box = box;
    ctx.setState(box.state, box.state_reason ?? null);
  } catch (err) {
    handleError(err);
  } finally {
    button.disabled = false;
  }
}

function confirmDelete(root: HTMLElement, name: string): void {
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const confirm = h("button", { type: "button", class: "danger" }, "Delete box");
  const dialog = h(
    "dialog",
    { "aria-labelledby": "del-title" },
    h(
      "div",
      { class: "dialog-form" },
      h("h2", { id: "del-title" }, `Delete ${name}?`),
      h("p", null, "The box, its files and its conversation are deleted for good."),
      error,
      h("div", { class: "dialog-actions" }, h("button", { type: "button", onclick: () => dialog.close() }, "Cancel"), confirm),
    ),
  );
  confirm.addEventListener("click", () => {
    confirm.disabled = true;
    api("DELETE", boxPath(name))
      .then(() => {
        dialog.close();
        go("#/boxes");
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
}
