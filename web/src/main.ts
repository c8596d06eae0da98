// The app's entry: the session check, the hash router and the frame around each screen.
import "./style.css";
import { api, ApiError, message, type Session } from "./api";
import { boxesScreen } from "./boxes";
import { boxScreen } from "./box";
import { cookieConflictScreen, DUPLICATE_SESSION_COOKIE } from "./cookie_conflict";
import { h, clear } from "./dom";
import { go, handleError, notice, notify, setNavHooks, takeFocusRequest } from "./nav";
import { enablePush } from "./push";
import { pair, pairConfirmScreen, signInScreen } from "./signin";
import * as outbox from "./outbox";
import { trackViewport } from "./viewport";
import { parseRoute } from "./route";

export type Cleanup = () => void;

let session: Session | null = null;
let cleanup: Cleanup | null = null;
const bar = h("header", { class: "bar" });
const main = h("main", { id: "main" });

/** The icon, drawn in the page so the bar never waits for an image. */
function logo(): SVGSVGElement {
  const ns = "http://www.w3.org/2000/svg";
  const el = <K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string>): SVGElementTagNameMap[K] => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  };
  const svg = el("svg", { viewBox: "0 0 100 100", width: "28", height: "28", "aria-hidden": "true" });
  svg.append(
    el("rect", { width: "100", height: "100", rx: "20", fill: "#0f4c5c" }),
    el("path", { d: "M20 56h60l-8 10H28z", fill: "#fff" }),
    el("path", { d: "M52 16v36h20zM48 26v26H34z", fill: "#fff" }),
    el("path", { d: "M12 74q8-5 16 0t16 0 16 0 16 0 12 0", stroke: "#5ec8d6", "stroke-width": "5", fill: "none" }),
  );
  return svg;
}

function renderBar(): void {
  clear(
    bar,
    h("a", { class: "brand", href: "#/boxes" }, logo(), "berth"),
    session
      ? h(
          "div",
          { class: "bar-actions" },
          h("button", { type: "button", class: "ghost", onclick: () => void enablePush(notify) }, "Notifications"),
          h("button", { type: "button", class: "ghost", onclick: () => void signOut() }, "Sign out"),
        )
      : null,
  );
}

async function signOut(): Promise<void> {
  try {
    await api("DELETE", "/v1/web/session");
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) return handleError(err);
  }
  session = null;
  go("#/signin", true);
}

/** Counts renders: a render that awaited (the session check, a pairing) and was overtaken
 * by a newer one (a hash change meanwhile) mounts nothing, so one screen is ever shown. */
let renders = 0;

async function render(): Promise<void> {
  const mine = ++renders;
  const current = (): boolean => mine === renders;
  cleanup?.();
  cleanup = null;
  const route = parseRoute(location.hash);
  if (route.screen === "pair" && route.code) {
    const code = route.code;
    // The code must not stay in the address bar or history.
    history.replaceState(null, "", session ? "#/boxes" : "#/signin");
    if (session) return confirmPairing(code, mine);
    session = await pair(code, notify);
    if (session) history.replaceState(null, "", "#/boxes");
    return current() ? render() : undefined;
  }
  if (!session && route.screen !== "signin") {
    try {
      session = await api<Session>("GET", "/v1/web/session");
    } catch (err) {
      if (!current()) return;
      if (err instanceof TypeError) {
        // Offline (a reload on a train): the session cannot be checked, but the screen can
        // be shown from the cached shell, and the chat keeps what waits in the outbox.
        // Check again once the network is back.
        window.addEventListener("online", () => void checkSessionAgain(), { once: true });
      } else if (err instanceof ApiError && err.code === DUPLICATE_SESSION_COOKIE) {
        renderBar();
        clear(main);
        cleanup = cookieConflictScreen(main, err, () => void render(), () => go("#/signin", true));
        document.title = "berth";
        return;
      } else {
        if (!(err instanceof ApiError && err.status === 401)) notify(message(err), "error");
        history.replaceState(null, "", "#/signin");
        return render();
      }
    }
    if (!current()) return;
  }
  renderBar();
  clear(main);
  if (route.screen === "signin") {
    cleanup = signInScreen(main, (s) => {
      session = s;
      go("#/boxes", true);
    });
  } else if (route.screen === "box" && route.box) {
    cleanup = boxScreen(main, route);
  } else {
    cleanup = boxesScreen(main);
  }
  document.title = route.box ? `${route.box} · berth` : "berth";
  focusScreen(mine);
}

/** A pairing link reached in this page while it is signed in (a tapped link, perhaps one an
 * agent wrote: login CSRF) replaces the session only once the user says so. Opened afresh,
 * as `berth pair` means it, a link signs in at once (`render`). */
function confirmPairing(code: string, mine: number): void {
  renderBar();
  clear(main);
  let open = true;
  const close = pairConfirmScreen(
    main,
    async () => {
      // A refused code (expired, used) changes nothing: the session stays.
      const next = await pair(code, notify);
      if (next) session = next;
      if (open) go("#/boxes", true);
    },
    () => go("#/boxes", true),
  );
  cleanup = () => {
    open = false;
    close();
  };
  document.title = "berth";
  focusScreen(mine);
}

/** After a navigation (not the first screen), focus goes to the new screen's heading, so a
 * screen reader announces it and the keyboard starts there, not on a control now gone. */
function focusScreen(render: number): void {
  const wanted = takeFocusRequest();
  if (render === 1 && !wanted) return;
  const target = (wanted && main.querySelector<HTMLElement>(wanted)) || main.querySelector<HTMLElement>("h1") || main;
  if (!target.matches("a[href], button, input, select, textarea, [tabindex]")) target.setAttribute("tabindex", "-1");
  target.focus({ preventScroll: true });
}

/** The session check that could not run offline: signed in, the bar gets its actions and
 * the outbox is sent; signed out, the sign-in screen. */
async function checkSessionAgain(): Promise<void> {
  try {
    session = await api<Session>("GET", "/v1/web/session");
    renderBar();
    await sendWaiting();
  } catch (err) {
    if (err instanceof TypeError) {
      window.addEventListener("online", () => void checkSessionAgain(), { once: true });
    } else {
      session = null;
      go("#/signin", true);
    }
  }
}

/** Sends what waits in the outbox for boxes whose chat is not open (the open chat sends its
 * own); the idempotency key makes a message sent by both one message. */
async function sendWaiting(): Promise<void> {
  if (!session || !navigator.onLine) return;
  const route = parseRoute(location.hash);
  for (const item of await outbox.all().catch(() => [])) {
    if (route.screen === "box" && route.tab === "chat" && route.box === item.box) continue;
    try {
      await api("POST", `/v1/boxes/${encodeURIComponent(item.box)}/messages`, { content: item.content, id: item.id });
      await outbox.remove(item.id);
    } catch (err) {
      if (err instanceof TypeError) return; // offline again: the next "online" retries
      if (err instanceof ApiError && err.status === 401) return;
      await outbox.remove(item.id); // refused for good (box deleted, too large): drop it
      notify(`A message to ${item.box} was not sent: ${message(err)}`, "error");
    }
  }
}

function start(): void {
  document.body.append(bar, notice, main);
  trackViewport();
  setNavHooks(
    () => void render(),
    () => {
      session = null;
      go("#/signin", true);
    },
    () => {
      // Checked again: the conflict screen if it lasts, else the screen as it was.
      session = null;
      void render();
    },
  );
  window.addEventListener("hashchange", () => {
    notify(""); // a message belongs to the screen it was shown on
    void render();
  });
  if ("serviceWorker" in navigator && window.isSecureContext) {
    navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => {
      // Without a service worker the app still works online; nothing to tell the user.
    });
  }
  window.addEventListener("online", () => void sendWaiting());
  void render().then(sendWaiting);
}

start();
