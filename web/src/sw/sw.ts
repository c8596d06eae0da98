// berth's service worker: caches the app shell (never an API answer) so the app opens
// offline, and shows push notifications.
declare const self: ServiceWorkerGlobalScope;
declare const __SHELL__: string[];
declare const __VERSION__: string;

const CACHE = `berth-shell-${__VERSION__}`;

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll(__SHELL__))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith("berth-shell-") && k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin) return;
  if (request.mode === "navigate" && (url.pathname === "/" || url.pathname === "/index.html")) {
    // The network first, so a new version shows at once; offline, the cached shell.
    event.respondWith(
      fetch(request).catch(async () => (await caches.match("/", { cacheName: CACHE })) ?? Response.error()),
    );
    return;
  }
  // The API, downloads, a box's port pages and everything else: straight to the network.
  if (!__SHELL__.includes(url.pathname)) return;
  event.respondWith(caches.match(request, { cacheName: CACHE }).then((hit) => hit ?? fetch(request)));
});

interface PushPayload {
  title?: string;
  body?: string;
  url?: string;
  box?: string;
}

self.addEventListener("push", (event) => {
  let payload: PushPayload = {};
  try {
    payload = (event.data?.json() ?? {}) as PushPayload;
  } catch {
    payload = { body: event.data?.text() ?? "" };
  }
  const url = typeof payload.url === "string" && payload.url.startsWith("/") ? payload.url : "/#/boxes";
  event.waitUntil(
    self.registration.showNotification(payload.title || "berth", {
      body: payload.body ?? "",
      icon: "/icons/icon-192.png",
      badge: "/icons/icon-192.png",
      tag: payload.box ? `box-${payload.box}` : undefined,
      data: { url },
    }),
  );
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const target = new URL((event.notification.data as { url?: string } | null)?.url ?? "/#/boxes", self.location.origin).href;
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then(async (windows) => {
      const open = windows.find((w) => new URL(w.url).origin === self.location.origin);
      if (open) {
        // Navigate first: focus() may be refused (no user activation) and must not stop it.
        const shown = open.url === target ? open : ((await open.navigate(target).catch(() => null)) ?? open);
        await shown.focus().catch(() => null);
        return;
      }
      await self.clients.openWindow(target);
    }),
  );
});

export {};
