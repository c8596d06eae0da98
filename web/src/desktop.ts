// The Desktop tab (loaded on demand, with noVNC): the box's screen, live, over the RFB
// WebSocket of docs/api.md "A desktop's screen over VNC" (`…/desktop/vnc`, berth's session
// cookie: no VNC password, nothing secret in the URL), scaled to fit. It only watches
// until "Take control" lets taps, clicks and keys through (and a field for the phone's
// keyboard). A dropped connection is reconnected with backoff while the box is awake; a box
// that went to sleep (watching does not keep it awake) is woken only when asked, since
// connecting wakes it.
import RFB from "@novnc/novnc";
import { api, boxPath, message, type BoxView, type Template } from "./api";
import type { BoxContext } from "./box_context";
import { h } from "./dom";
import { handleError } from "./nav";
import { stateLabel } from "./state";
import { hasDesktop } from "./templates";

const RETRY_MS = [1000, 2000, 4000, 8000, 15000];
/** X keysyms of the keys the typing field sends by name. */
const KEYSYM = { Enter: 0xff0d, Backspace: 0xff08, Tab: 0xff09, Escape: 0xff1b } as const;

type Phase =
  | { kind: "connecting"; waking: boolean }
  | { kind: "connected" }
  | { kind: "retrying"; why: string; inSeconds: number }
  | { kind: "asleep"; state: string }
  | { kind: "failed"; why: string; retry: boolean };

/** The X keysym of a character: Latin-1 as itself, the rest as Unicode keysyms. */
function keysymOf(char: string): number {
  const code = char.codePointAt(0) ?? 0;
  return code < 0x100 ? code : 0x01000000 | code;
}

export function desktopPanel(root: HTMLElement, ctx: BoxContext): () => void {
  const status = h("p", { class: "desktop-status", role: "status" });
  const control = h("button", { type: "button", disabled: true }, "Take control");
  const wake = h("button", { type: "button", hidden: true }, "Wake and reconnect");
  const screen = h("div", { class: "desktop-screen", role: "region", "aria-label": `Desktop of ${ctx.name}` });
  const typing = h("input", {
    class: "desktop-type",
    type: "text",
    "aria-label": "Type into the desktop",
    placeholder: "Type here to send keys",
    autocomplete: "off",
    autocapitalize: "off",
    spellcheck: "false",
    enterkeyhint: "enter",
    hidden: true,
  });
  // Below the screen, so that it never moves the screen when it comes.
  const readyNote = h("p", { class: "desktop-note", hidden: true });
  root.append(h("div", { class: "desktop-bar" }, status, h("div", { class: "desktop-actions" }, wake, control)), screen, typing, readyNote);
  root.classList.add("desktop");

  let rfb: RFB | null = null;
  let closed = false;
  let controlling = false;
  let attempt = 0;
  let everConnected = false;
  let retry: number | undefined;
  let countdown: number | undefined;

  const show = (phase: Phase): void => {
    window.clearInterval(countdown);
    wake.hidden = phase.kind !== "asleep" && !(phase.kind === "failed" && phase.retry);
    control.hidden = phase.kind === "asleep" || phase.kind === "failed";
    control.disabled = phase.kind !== "connected";
    typing.hidden = !(controlling && phase.kind === "connected");
    // What the empty frame says while there is no screen in it.
    screen.dataset.note = { connecting: "", connected: "", retrying: "Reconnecting…", asleep: "Asleep", failed: "No screen" }[phase.kind];
    switch (phase.kind) {
      case "connecting":
        status.textContent = phase.waking ? "Waking the box and connecting…" : "Connecting…";
        break;
      case "connected":
        status.textContent = controlling ? "Connected: in control" : "Connected: watching";
        break;
      case "retrying": {
        let left = phase.inSeconds;
        const say = (): void => {
          status.textContent = `Disconnected: ${phase.why}. Reconnecting in ${left} s…`;
        };
        say();
        countdown = window.setInterval(() => {
          left = Math.max(0, left - 1);
          say();
        }, 1000);
        break;
      }
      case "asleep":
        status.textContent = `The box is ${phase.state}: watching does not keep it awake.`;
        break;
      case "failed":
        status.textContent = `Disconnected: ${phase.why}.`;
        break;
    }
  };

  const setControl = (on: boolean): void => {
    controlling = on;
    control.textContent = on ? "Stop controlling" : "Take control";
    control.classList.toggle("primary", on);
    if (!rfb) return;
    rfb.viewOnly = !on;
    if (on) rfb.focus({ preventScroll: true });
    else rfb.blur();
    show({ kind: "connected" });
  };
  control.addEventListener("click", () => setControl(!controlling));

  // The phone's keyboard cannot type into a canvas: what is typed here is sent as keys.
  const sendTyped = (): void => {
    for (const char of typing.value) rfb?.sendKey(keysymOf(char), null);
    typing.value = "";
  };
  typing.addEventListener("input", (event) => {
    // A word still being composed (an input method) is sent once it is done.
    if (!(event as InputEvent).isComposing) sendTyped();
  });
  typing.addEventListener("compositionend", sendTyped);
  typing.addEventListener("keydown", (event) => {
    const keysym = KEYSYM[event.key as keyof typeof KEYSYM];
    if (keysym === undefined || typing.value !== "") return;
    event.preventDefault();
    rfb?.sendKey(keysym, null);
  });

  const connect = (waking: boolean): void => {
    if (closed) return;
    window.clearTimeout(retry);
    show({ kind: "connecting", waking });
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    // The socket is ours, so that its close reason can be told.
    const socket = new WebSocket(`${scheme}//${location.host}${boxPath(ctx.name, "/desktop/vnc")}`, ["binary"]);
    let closeReason = "";
    socket.addEventListener("close", (event) => {
      closeReason = event.reason;
    });
    let connected = false;
    let client: RFB;
    try {
      client = new RFB(screen, socket, { shared: true });
    } catch (err) {
      socket.close();
      show({ kind: "failed", why: message(err), retry: true });
      return;
    }
    client.viewOnly = !controlling;
    client.scaleViewport = true;
    client.resizeSession = false;
    client.background = "transparent";
    client.addEventListener("connect", () => {
      if (rfb !== client) return;
      connected = true;
      everConnected = true;
      attempt = 0;
      // The frame takes the screen's shape, so the screen fills it on a phone.
      const canvas = screen.querySelector("canvas");
      if (canvas?.width && canvas.height) screen.style.aspectRatio = `${canvas.width} / ${canvas.height}`;
      show({ kind: "connected" });
      void refreshState();
      void loadReadyTime(client);
    });
    client.addEventListener("securityfailure", (event) => {
      closeReason = event.detail.reason ?? "the desktop refused the connection";
    });
    client.addEventListener("disconnect", (event) => {
      if (rfb !== client || closed) return;
      rfb = null;
      const why = closeReason || (connected ? (event.detail.clean ? "the desktop closed" : "the connection dropped") : "cannot reach the desktop");
      void afterDrop(why);
    });
    rfb = client;
  };

  /** How long the desktop took to come up at the box's start (`ready_after_ms`), once
   * `client` is connected; nothing when that is not known (a box restored from a snapshot,
   * or started by an older berth). */
  const loadReadyTime = async (client: RFB): Promise<void> => {
    try {
      const desktop = await api<{ ready_after_ms?: number | null }>("GET", boxPath(ctx.name, "/desktop"));
      const ms = desktop.ready_after_ms;
      if (closed || rfb !== client || typeof ms !== "number") return;
      readyNote.textContent = `Desktop ready ${(ms / 1000).toFixed(1)} s after the box started.`;
      readyNote.hidden = false;
    } catch {
      // The screen shows all the same.
    }
  };

  /** The box as it is now, shown in the screen's head; `null` offline. */
  const refreshState = async (): Promise<BoxView | null> => {
    try {
      const box = await api<BoxView>("GET", boxPath(ctx.name));
      if (!closed) ctx.setState(box.state, box.state_reason ?? null);
      return box;
    } catch (err) {
      if (!closed && !(err instanceof TypeError)) handleError(err);
      return null;
    }
  };

  /** Whether the box's template has a desktop; when that cannot be told, it may. */
  const desktopOf = async (box: BoxView): Promise<boolean> => {
    try {
      const { templates } = await api<{ templates: Template[] }>("GET", "/v1/templates");
      const template = templates.find((t) => t.name === box.template);
      return !template || hasDesktop(template);
    } catch {
      return true;
    }
  };

  /** After a drop: reconnect with backoff while the box is awake; a sleeping box waits for
   * "Wake and reconnect". */
  const afterDrop = async (why: string): Promise<void> => {
    const box = await refreshState();
    if (closed) return;
    if (box && !everConnected && !(await desktopOf(box))) {
      if (!closed) show({ kind: "failed", why: `this box has no desktop (its template ${box.template} runs no VNC server)`, retry: false });
      return;
    }
    if (closed) return;
    if (box && box.state !== "running" && box.state !== "starting") {
      show({ kind: "asleep", state: stateLabel(box) });
      return;
    }
    const delay = RETRY_MS[Math.min(attempt++, RETRY_MS.length - 1)]!;
    show({ kind: "retrying", why, inSeconds: delay / 1000 });
    retry = window.setTimeout(() => connect(false), delay);
  };

  wake.addEventListener("click", () => {
    attempt = 0;
    connect(true);
  });
  const onOnline = (): void => {
    if (!rfb && !closed && wake.hidden) connect(false);
  };
  window.addEventListener("online", onOnline);
  connect(ctx.box !== null && ctx.box.state !== "running");

  return () => {
    closed = true;
    window.clearTimeout(retry);
    window.clearInterval(countdown);
    window.removeEventListener("online", onOnline);
    root.classList.remove("desktop");
    rfb?.disconnect();
    rfb = null;
  };
}
