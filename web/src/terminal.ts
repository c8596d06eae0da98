// The terminal tab (loaded on demand, with xterm.js): the PTY WebSocket of docs/api.md
// "Terminals", reattached with id and offset after a drop, and a key row for phones.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import type { BoxContext } from "./box_context";
import { h } from "./dom";
import { boxPath, type ClientControl, type ServerControl } from "./api";

const KEYS: [string, string][] = [
  ["Esc", "\x1b"],
  ["Tab", "\t"],
  ["Up", "\x1b[A"],
  ["Down", "\x1b[B"],
  ["Left", "\x1b[D"],
  ["Right", "\x1b[C"],
];
const RETRY_MS = [500, 1000, 2000, 4000, 8000];

function theme(dark: boolean) {
  return dark
    ? { background: "#0b1418", foreground: "#dce7ea", cursor: "#5ec8d6", selectionBackground: "#2b4a52" }
    : { background: "#fbfdfd", foreground: "#13262c", cursor: "#0f4c5c", selectionBackground: "#c5e4ea" };
}

export function terminalPanel(root: HTMLElement, ctx: BoxContext): () => void {
  const dark = matchMedia("(prefers-color-scheme: dark)");
  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000, theme: theme(dark.matches), fontFamily: "ui-monospace, 'DejaVu Sans Mono', Menlo, monospace" });
  const fit = new FitAddon();
  term.loadAddon(fit);
  const screen = h("div", { class: "term" });
  const line = h("p", { class: "muted term-status", "aria-live": "polite" });
  const ctrl = h("button", { type: "button", "aria-pressed": "false" }, "Ctrl");
  const keys = h(
    "div",
    { class: "keys", role: "toolbar", "aria-label": "Terminal keys" },
    h("button", { type: "button", onclick: () => sendKey("\x1b") }, "Esc"),
    h("button", { type: "button", onclick: () => sendKey("\t") }, "Tab"),
    ctrl,
    KEYS.slice(2).map(([label, seq]) => h("button", { type: "button", onclick: () => sendKey(seq) }, label)),
  );
  root.append(screen, line, keys);
  root.classList.add("terminal");
  term.open(screen);

  let ws: WebSocket | null = null;
  let id: string | null = null;
  let offset = 0; // the output offset of the next byte we expect
  let ended = false;
  let closed = false;
  let attempt = 0;
  let retry: number | undefined;
  let ctrlOn = false;
  const encoder = new TextEncoder();

  const setCtrl = (on: boolean): void => {
    ctrlOn = on;
    ctrl.setAttribute("aria-pressed", String(on));
  };
  ctrl.addEventListener("click", () => {
    setCtrl(!ctrlOn);
    term.focus();
  });

  const send = (data: string): void => {
    if (ws?.readyState === WebSocket.OPEN) ws.send(encoder.encode(data));
  };
  const sendKey = (seq: string): void => {
    send(seq);
    term.focus();
  };
  term.onData((data) => {
    // The sticky Ctrl: the next letter becomes its control character (Ctrl+C is 0x03).
    if (ctrlOn && data.length === 1 && /[a-z@[\\\]^_ ]/i.test(data)) {
      const code = data === " " ? 0 : data.toUpperCase().charCodeAt(0) - 64;
      setCtrl(false);
      return send(String.fromCharCode(code));
    }
    send(data);
  });
  const sendSize = (): void => {
    const resize: ClientControl = { resize: { cols: term.cols, rows: term.rows } };
    if (ws?.readyState === WebSocket.OPEN) ws.send(JSON.stringify(resize));
  };
  term.onResize(sendSize);

  const connect = (): void => {
    if (closed || ended) return;
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const query = id ? `id=${encodeURIComponent(id)}&offset=${offset}` : `cols=${term.cols}&rows=${term.rows}`;
    const socket = new WebSocket(`${scheme}//${location.host}${boxPath(ctx.name, `/pty?${query}`)}`);
    socket.binaryType = "arraybuffer";
    socket.onopen = () => {
      attempt = 0;
      line.textContent = "";
      sendSize();
    };
    socket.onmessage = (e: MessageEvent<ArrayBuffer | string>) => {
      if (typeof e.data !== "string") {
        const bytes = new Uint8Array(e.data);
        offset += bytes.length;
        term.write(bytes);
        return;
      }
      let msg: ServerControl;
      try {
        msg = JSON.parse(e.data) as ServerControl;
      } catch {
        return;
      }
      if ("id" in msg) {
        id = msg.id;
        offset = msg.offset;
      } else if ("exit" in msg) {
        ended = true;
        line.textContent = `The shell ended (status ${msg.exit.code}). Open the tab again for a new one.`;
      } else if ("detached" in msg) {
        ended = true;
        line.textContent = "This terminal was opened somewhere else.";
      } else if ("error" in msg) {
        line.textContent = msg.error.message || "The terminal failed.";
        if (!id) ended = true;
      }
    };
    socket.onclose = () => {
      if (ws !== socket) return;
      ws = null;
      if (closed || ended) return;
      line.textContent = "Connection lost: reconnecting…";
      retry = window.setTimeout(connect, RETRY_MS[Math.min(attempt++, RETRY_MS.length - 1)]);
    };
    ws = socket;
  };

  const refit = (): void => {
    try {
      fit.fit();
    } catch {
      // Not laid out yet (hidden): the next resize fits it.
    }
  };
  const observer = new ResizeObserver(refit);
  observer.observe(screen);
  const onScheme = (): void => {
    term.options.theme = theme(dark.matches);
  };
  dark.addEventListener("change", onScheme);
  const onOnline = (): void => {
    if (!ws && !ended) {
      window.clearTimeout(retry);
      connect();
    }
  };
  window.addEventListener("online", onOnline);
  refit();
  connect();
  term.focus();

  return () => {
    closed = true;
    window.clearTimeout(retry);
    observer.disconnect();
    dark.removeEventListener("change", onScheme);
    window.removeEventListener("online", onOnline);
    root.classList.remove("terminal");
    ws?.close();
    term.dispose();
  };
}
