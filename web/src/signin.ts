// Sign-in: a pairing link's code or an API key, exchanged once for a session cookie. The
// key is sent once and kept nowhere. A pairing link reached inside a page already signed in
// asks before it replaces the session.
import { api, ApiError, message, type Session } from "./api";
import { h } from "./dom";

function deviceName(): string {
  const ua = navigator.userAgent;
  const browser = /Edg\//.test(ua) ? "Edge" : /Firefox\//.test(ua) ? "Firefox" : /Chrome\//.test(ua) ? "Chrome" : /Safari\//.test(ua) ? "Safari" : "Browser";
  const os = /Android/.test(ua) ? "Android" : /iPhone|iPad/.test(ua) ? "iOS" : /Mac OS X/.test(ua) ? "macOS" : /Windows/.test(ua) ? "Windows" : /Linux/.test(ua) ? "Linux" : "";
  return os ? `${browser} on ${os}` : browser;
}

export async function pair(code: string, notify: (text: string, kind?: "info" | "error") => void): Promise<Session | null> {
  try {
    return await api<Session>("POST", "/v1/web/sessions", { pairing_code: code, device: deviceName() });
  } catch (err) {
    notify(
      err instanceof ApiError && err.status === 401
        ? "That pairing link has expired or was already used. Run berth pair for a new one."
        : message(err),
      "error",
    );
    return null;
  }
}

export function signInScreen(root: HTMLElement, done: (session: Session) => void): () => void {
  const key = h("input", { id: "api-key", type: "password", name: "api-key", autocomplete: "off", required: true, spellcheck: "false" });
  const error = h("p", { class: "error", role: "alert", hidden: true });
  const submit = h("button", { type: "submit", class: "primary" }, "Sign in");
  const form = h(
    "form",
    { class: "card signin" },
    h("h1", null, "Sign in"),
    h("p", { class: "muted" }, "Open the link that ", h("code", null, "berth pair"), " prints on this device, or paste an API key."),
    h("label", { for: "api-key" }, "API key"),
    key,
    error,
    submit,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    submit.disabled = true;
    error.hidden = true;
    api<Session>("POST", "/v1/web/sessions", { api_key: key.value.trim(), device: deviceName() })
      .then((session) => {
        key.value = "";
        done(session);
      })
      .catch((err: unknown) => {
        error.textContent = err instanceof ApiError && err.status === 401 ? "That key was not accepted." : message(err);
        error.hidden = false;
        submit.disabled = false;
      });
  });
  root.append(form);
  key.focus();
  return () => {};
}

/**
 * A pairing link reached inside a page that is signed in: a link tapped in the app (one an
 * agent wrote, say), not one opened afresh. Its code is sent only on **Continue**; **Cancel**
 * never sends it, so a link planted to sign this browser in to another tenant (login CSRF)
 * neither works nor uses the code up.
 */
export function pairConfirmScreen(root: HTMLElement, proceed: () => Promise<void>, cancel: () => void): () => void {
  // Cancel is the safe answer, so it is the one that stands out.
  const no = h("button", { type: "button", class: "primary" }, "Cancel");
  const yes = h("button", { type: "button" }, "Continue");
  yes.addEventListener("click", () => {
    yes.disabled = no.disabled = true;
    void proceed().finally(() => {
      yes.disabled = no.disabled = false;
    });
  });
  no.addEventListener("click", cancel);
  root.append(
    h(
      "section",
      { class: "card signin", "aria-labelledby": "pair-title" },
      h("h1", { id: "pair-title" }, "Sign in again?"),
      h(
        "p",
        null,
        "This pairing link would sign this browser in again, replacing your current session. Continue only if you opened a link that ",
        h("code", null, "berth pair"),
        " printed for you.",
      ),
      no,
      yes,
    ),
  );
  return () => {};
}
