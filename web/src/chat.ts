// The conversation: history from the stored events, then the live stream (EventSource,
// closed while the page is hidden or offline and resumed after the last seq seen), and a
// composer whose messages go through the outbox.
import { api, ApiError, boxPath, EVENT_TYPES, message, type BerthEvent } from "./api";
import type { BoxContext } from "./box_context";
import { h, isNetworkError, randomId } from "./dom";
import { renderTimeline, type Timeline } from "./chat_render";
import { handleError } from "./nav";
import * as outbox from "./outbox";
import { holdAwake, letSleep } from "./wakelock";

const REOPEN_MS = 3000;

export function chatPanel(root: HTMLElement, ctx: BoxContext): () => void {
  const log = h("div", { class: "log", role: "log", "aria-label": "Conversation", "aria-live": "polite", tabindex: 0 });
  const status = h("p", { class: "wake", role: "status", hidden: true });
  const field = h("textarea", { id: "message", name: "message", rows: 1, placeholder: "Message your agent", enterkeyhint: "send", autocomplete: "off" });
  const send = h("button", { type: "submit", class: "primary send" }, "Send");
  const composer = h("form", { class: "composer" }, h("label", { for: "message", class: "visually-hidden" }, "Message"), field, send);
  root.append(log, status, composer);
  root.classList.add("chat");

  const timeline: Timeline = renderTimeline(log, ctx.name, {
    onState(state, reason, live) {
      ctx.setState(state, reason);
      if (!live) return;
      // Timed by this page's clock: the events' times are too coarse for a wake of ~1 s.
      if (state === "starting") {
        wakeStartedAt ??= performance.now();
        showStatus("Waking your agent…");
      } else if (state === "running" && wakeStartedAt !== null) {
        showStatus(`Woke in ${((performance.now() - wakeStartedAt) / 1000).toFixed(1)} s`);
        wakeStartedAt = null;
      } else if (state === "failed") {
        wakeStartedAt = null;
        showStatus("");
      }
    },
    onTurnEnd() {
      letSleep();
    },
  });
  let wakeStartedAt: number | null = null;
  const showStatus = (text: string): void => {
    status.textContent = text;
    status.hidden = !text;
  };

  let lastSeq = 0;
  let closed = false;
  let source: EventSource | null = null;
  let reopenTimer: number | undefined;

  const accept = (ev: BerthEvent, live: boolean): void => {
    if (ev.seq <= lastSeq) return; // seen already: a reconnect may repeat the tail
    lastSeq = ev.seq;
    timeline.add(ev, live);
  };

  const onMessage = (e: MessageEvent<string>): void => {
    try {
      accept(JSON.parse(e.data) as BerthEvent, true);
    } catch {
      // Not JSON: not an event of ours.
    }
  };

  const openStream = (): void => {
    window.clearTimeout(reopenTimer);
    if (source || closed || document.visibilityState !== "visible" || !navigator.onLine) return;
    const es = new EventSource(boxPath(ctx.name, `/events?after=${lastSeq}`), { withCredentials: true });
    for (const type of EVENT_TYPES) es.addEventListener(type, onMessage as EventListener);
    // While the stream is open the daemon counts this screen as watching the box (no push
    // for what it shows); the attribute lets a test know when that starts.
    es.onopen = () => log.setAttribute("data-live", "");
    es.onerror = () => {
      log.removeAttribute("data-live");
      // EventSource retries by itself (with Last-Event-ID) unless the server refused it.
      if (es.readyState === EventSource.CLOSED) {
        closeStream();
        // Refused: find out why (a 401 means the session ended) before trying again.
        api("GET", boxPath(ctx.name))
          .then(() => {
            if (!closed) reopenTimer = window.setTimeout(openStream, REOPEN_MS);
          })
          .catch((err: unknown) => {
            if (isNetworkError(err)) reopenTimer = window.setTimeout(openStream, REOPEN_MS);
            else handleError(err);
          });
      }
    };
    source = es;
  };
  const closeStream = (): void => {
    source?.close();
    source = null;
    log.removeAttribute("data-live");
  };

  const pending = new Map<string, HTMLElement>();
  let flushing: Promise<void> | null = null;
  let again = false;
  /** One pass over the outbox, in order; `false` when the rest must wait (offline, signed out). */
  const flushOnce = async (): Promise<boolean> => {
    for (const item of await outbox.waiting(ctx.name)) {
      if (closed) return false;
      if (!navigator.onLine) {
        // Known offline: wait for the "online" event rather than fail a request.
        pending.get(item.id)?.classList.add("queued");
        continue;
      }
      try {
        await api("POST", boxPath(ctx.name, "/messages"), { content: item.content, id: item.id });
        await outbox.remove(item.id);
        pending.get(item.id)?.classList.remove("queued");
      } catch (err) {
        if (isNetworkError(err)) {
          pending.get(item.id)?.classList.add("queued");
          return false; // offline: the rest waits too, in order
        }
        await outbox.remove(item.id);
        pending.get(item.id)?.remove();
        pending.delete(item.id);
        if (err instanceof ApiError && err.status === 401) {
          handleError(err);
          return false;
        }
        timeline.error(`Not sent: ${message(err)}`);
      }
    }
    return true;
  };
  const flush = (): Promise<void> => {
    if (flushing) {
      // A message put during a pass may come after the list that pass read: one more pass.
      again = true;
      return flushing;
    }
    flushing = (async () => {
      let more = true;
      while (more) {
        again = false;
        more = (await flushOnce()) && again;
      }
    })().finally(() => {
      flushing = null;
    });
    return flushing;
  };

  const showPending = (item: outbox.Outgoing, queued: boolean): void => {
    const bubble = timeline.pending(item.id, item.content, () => pending.delete(item.id));
    bubble.classList.toggle("queued", queued);
    bubble.scrollIntoView({ block: "end" });
    pending.set(item.id, bubble);
  };

  composer.addEventListener("submit", (event) => {
    event.preventDefault();
    const content = field.value.trim();
    if (!content) return;
    field.value = "";
    autosize();
    const item = { id: randomId(), box: ctx.name, content, created_at: new Date().toISOString() };
    // "Waiting for the network" only once the outbox holds it (the flush below says so): a
    // page closed before then would lose what the label promised to send.
    showPending(item, false);
    if (ctx.box && (ctx.box.state === "stopped" || ctx.box.state === "failed") && navigator.onLine) {
      wakeStartedAt = performance.now();
      showStatus("Waking your agent…");
      ctx.setState("starting", null);
    } else if (wakeStartedAt === null) {
      showStatus("");
    }
    holdAwake();
    outbox
      .put(item)
      .catch(() => {})
      .then(flush)
      .catch(handleError);
  });
  field.addEventListener("keydown", (event) => {
    // Enter sends on a desktop keyboard; Shift+Enter is a new line. Phones use the button.
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing && matchMedia("(pointer: fine)").matches) {
      event.preventDefault();
      composer.requestSubmit();
    }
  });
  const autosize = (): void => {
    field.style.height = "auto";
    field.style.height = `${Math.min(field.scrollHeight, 160)}px`;
  };
  field.addEventListener("input", autosize);

  const onVisibility = (): void => {
    if (document.visibilityState === "visible") openStream();
    else closeStream(); // a hidden page is not watching: berth may then notify by push
  };
  const onOnline = (): void => {
    openStream();
    void flush();
  };
  const onOffline = (): void => closeStream();
  document.addEventListener("visibilitychange", onVisibility);
  window.addEventListener("online", onOnline);
  window.addEventListener("offline", onOffline);

  void (async () => {
    try {
      let more = true;
      while (more && !closed) {
        const page = await api<{ events: BerthEvent[]; next_after: number; more: boolean }>(
          "GET",
          boxPath(ctx.name, `/events?after=${lastSeq}&wait=false`),
        );
        for (const ev of page.events) accept(ev, false);
        lastSeq = Math.max(lastSeq, page.next_after);
        more = page.more;
      }
      timeline.historyDone();
    } catch (err) {
      if (!isNetworkError(err)) return handleError(err);
    }
    if (closed) return;
    for (const item of await outbox.waiting(ctx.name).catch(() => [])) showPending(item, true);
    openStream();
    await flush();
  })();

  return () => {
    closed = true;
    root.classList.remove("chat");
    window.clearTimeout(reopenTimer);
    closeStream();
    letSleep();
    document.removeEventListener("visibilitychange", onVisibility);
    window.removeEventListener("online", onOnline);
    window.removeEventListener("offline", onOffline);
  };
}
