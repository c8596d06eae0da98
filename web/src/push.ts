// Turning on notifications: permission, a push subscription with berth's VAPID key, and
// the subscription sent to berth. Every failure is told to the user, never thrown.
import { api, message } from "./api";

function keyBytes(base64url: string): Uint8Array<ArrayBuffer> {
  const b64 = base64url.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(base64url.length / 4) * 4, "=");
  const raw = atob(b64);
  const out = new Uint8Array(new ArrayBuffer(raw.length));
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

export async function enablePush(notify: (text: string, kind?: "info" | "error") => void): Promise<void> {
  if (!window.isSecureContext || !("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    return notify("Notifications need the app opened over HTTPS in a browser that supports Web Push (on iPhone: add it to the Home Screen first).", "error");
  }
  try {
    if (Notification.permission === "default") notify("Asking this browser for permission to notify you…");
    const permission = await Notification.requestPermission();
    if (permission !== "granted") {
      return notify("Notifications are blocked for this site: allow them in the browser's site settings.", "error");
    }
    const { public_key } = await api<{ public_key: string }>("GET", "/v1/web/push/key");
    const registration = await navigator.serviceWorker.ready;
    let subscription = await registration.pushManager.getSubscription();
    if (subscription) {
      // A subscription made with another key (berth's data dir was replaced) cannot work.
      const current = subscription.options.applicationServerKey;
      const want = keyBytes(public_key);
      const same = current && new Uint8Array(current).every((b, i) => b === want[i]) && current.byteLength === want.length;
      if (!same) {
        await subscription.unsubscribe();
        subscription = null;
      }
    }
    subscription ??= await registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(public_key) });
    await api("POST", "/v1/web/push/subscriptions", subscription.toJSON());
    notify("Notifications are on: this device hears when an answer is ready while you are away.");
  } catch (err) {
    notify(`Could not turn on notifications: ${message(err)}`, "error");
  }
}
