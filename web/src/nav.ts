// Navigation and the notice line, shared by every screen.
import { ApiError, message } from "./api";
import { DUPLICATE_SESSION_COOKIE } from "./cookie_conflict";
import { clear, h } from "./dom";

export const notice = h("div", { class: "notice", "aria-live": "polite" });

/** A short message under the bar; `error` ones are alerts. */
export function notify(text: string, kind: "info" | "error" = "info"): void {
  clear(
    notice,
    text
      ? h(
          "p",
          { class: kind, role: kind === "error" ? "alert" : null },
          h("span", null, text),
          h("button", { class: "dismiss", type: "button", "aria-label": "Dismiss", onclick: () => notify("") }, "×"),
        )
      : null,
  );
}

let rerender: () => void = () => {};
let onSignedOut: () => void = () => {};
let onSessionInDoubt: () => void = () => {};

export function setNavHooks(render: () => void, signedOut: () => void, sessionInDoubt: () => void): void {
  rerender = render;
  onSignedOut = signedOut;
  onSessionInDoubt = sessionInDoubt;
}

let focusRequest: string | null = null;

/** Where focus goes once the next screen is drawn (a selector in it), instead of its
 * heading: a tab chosen with the arrow keys keeps the focus. */
export function focusAfterNavigation(selector: string): void {
  focusRequest = selector;
}

export function takeFocusRequest(): string | null {
  const selector = focusRequest;
  focusRequest = null;
  return selector;
}

export function go(hash: string, replace = false): void {
  if (replace) {
    history.replaceState(null, "", hash);
    rerender();
  } else {
    location.hash = hash;
  }
}

/** The session ended (signed out, revoked or expired). */
export function signedOut(): void {
  onSignedOut();
}

export function handleError(err: unknown): void {
  if (err instanceof ApiError && err.status === 401) signedOut();
  // Two session cookies: the session is checked again, which shows the way out.
  else if (err instanceof ApiError && err.code === DUPLICATE_SESSION_COOKIE) onSessionInDoubt();
  else notify(message(err), "error");
}
