// The screen for a browser that carries two berth session cookies (one planted by a page
// that is not berth's, docs/security.md): berth serves neither, and says so with `400
// duplicate_session_cookie`. It shows berth's message and the ways out: try again (that
// answer already asked the browser to drop the planted one, where berth could), or sign
// out, or clear the site's cookies in the browser.
import { api, ApiError, message } from "./api";
import { h } from "./dom";

export const DUPLICATE_SESSION_COOKIE = "duplicate_session_cookie";

export function cookieConflictScreen(root: HTMLElement, err: ApiError, retry: () => void, signedOut: () => void): () => void {
  const status = h("p", { class: "error", role: "alert", hidden: true });
  const again = h("button", { type: "button", class: "primary" }, "Try again");
  const out = h("button", { type: "button" }, "Sign out");
  again.addEventListener("click", retry);
  out.addEventListener("click", () => {
    out.disabled = true;
    status.hidden = true;
    api("DELETE", "/v1/web/session").then(signedOut, (e: unknown) => {
      // Nothing left to end (signed out elsewhere): signed out all the same.
      if (e instanceof ApiError && e.status === 401) return signedOut();
      status.textContent = message(e);
      status.hidden = false;
      out.disabled = false;
    });
  });
  root.append(
    h(
      "section",
      { class: "card signin", "aria-labelledby": "conflict-title" },
      h("h1", { id: "conflict-title" }, "This browser has two sign-ins"),
      h("p", null, err.message.charAt(0).toUpperCase() + err.message.slice(1)),
      status,
      again,
      out,
    ),
  );
  again.focus();
  return () => {};
}
