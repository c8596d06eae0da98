// The box list: live state (polled while the page is visible), a "New box" dialog.
import { api, message, type BoxView, type Template } from "./api";
import { ago, clear, h, shortTime } from "./dom";
import { go, handleError } from "./nav";
import { stateLabel } from "./state";

const POLL_MS = 3000;

export function boxesScreen(root: HTMLElement): () => void {
  const list = h("ul", { class: "boxes", "aria-label": "Boxes" });
  const empty = h("p", { class: "muted empty", hidden: true }, "No boxes yet. Make one with New box.");
  const newButton = h("button", { type: "button", class: "primary", onclick: () => openNewBox(root) }, "New box");
  root.append(h("div", { class: "page-head" }, h("h1", null, "Boxes"), newButton), list, empty);

  let timer: number | undefined;
  let stopped = false;
  const refresh = async (): Promise<void> => {
    window.clearTimeout(timer);
    if (stopped) return;
    if (!navigator.onLine) return; // polled again by the "online" event
    try {
      const { boxes } = await api<{ boxes: BoxView[] }>("GET", "/v1/boxes");
      if (stopped) return;
      renderList(list, boxes);
      empty.hidden = boxes.length > 0;
    } catch (err) {
      handleError(err);
    }
    if (!stopped && document.visibilityState === "visible") timer = window.setTimeout(() => void refresh(), POLL_MS);
  };
  const onVisible = (): void => {
    if (document.visibilityState === "visible") void refresh();
  };
  document.addEventListener("visibilitychange", onVisible);
  window.addEventListener("online", onVisible);
  void refresh();
  return () => {
    stopped = true;
    window.clearTimeout(timer);
    document.removeEventListener("visibilitychange", onVisible);
    window.removeEventListener("online", onVisible);
  };
}

function renderList(list: HTMLElement, boxes: BoxView[]): void {
  // The box used last comes first: that is the one a phone opens the app for.
  const latest = (box: BoxView): string => box.last_activity_at ?? box.created_at;
  const sorted = [...boxes].sort((a, b) => latest(b).localeCompare(latest(a)) || a.name.localeCompare(b.name));
  clear(
    list,
    sorted.map((box) =>
      h(
        "li",
        { class: "box-row" },
        h("a", { href: `#/boxes/${encodeURIComponent(box.name)}/chat`, class: "box-link" }, box.name),
        h(
          "div",
          { class: "box-meta" },
          h("span", { class: `state state-${box.state}` }, stateLabel(box)),
          h(
            "span",
            { class: "muted" },
            box.last_activity_at
              ? `${box.template} · active ${ago(box.last_activity_at)}`
              : `${box.template} · created ${shortTime(box.created_at)}`,
          ),
        ),
      ),
    ),
  );
}

function openNewBox(root: HTMLElement): void {
  const name = h("input", { id: "new-name", name: "name", required: true, pattern: "[a-z0-9]([a-z0-9\\-]{0,61}[a-z0-9])?", autocomplete: "off", autocapitalize: "none", spellcheck: "false", "aria-describedby": "new-name-hint" });
  const template = h("select", { id: "new-template", name: "template" });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const create = h("button", { type: "submit", class: "primary" }, "Create");
  const dialog = h(
    "dialog",
    { "aria-labelledby": "new-title" },
    h(
      "form",
      { method: "dialog", class: "dialog-form" },
      h("h2", { id: "new-title" }, "New box"),
      h("label", { for: "new-name" }, "Name"),
      name,
      h("p", { id: "new-name-hint", class: "hint" }, "Lower-case letters, digits and dashes."),
      h("label", { for: "new-template" }, "Template"),
      template,
      error,
      h("div", { class: "dialog-actions" }, h("button", { type: "button", onclick: () => dialog.close() }, "Cancel"), create),
    ),
  );
  dialog.addEventListener("close", () => dialog.remove());
  root.append(dialog);
  dialog.showModal();

  api<{ templates: Template[] }>("GET", "/v1/templates")
    .then(({ templates }) => {
      const usable = templates.filter((t) => !t.unavailable);
      // Boxes with an agent first: that is what the app is for.
      usable.sort((a, b) => Number(!!b.harness) - Number(!!a.harness) || a.name.localeCompare(b.name));
      clear(template, usable.map((t) => h("option", { value: t.name }, t.name)));
    })
    .catch((err: unknown) => {
      error.textContent = message(err);
      error.hidden = false;
    });

  dialog.querySelector("form")?.addEventListener("submit", (event) => {
    event.preventDefault();
    create.disabled = true;
    error.hidden = true;
    api<BoxView>("POST", "/v1/boxes", { name: name.value.trim(), template: template.value || undefined })
      .then((box) => {
        dialog.close();
        go(`#/boxes/${encodeURIComponent(box.name)}/chat`);
      })
      .catch((err: unknown) => {
        error.textContent = message(err);
        error.hidden = false;
        create.disabled = false;
      });
  });
}
