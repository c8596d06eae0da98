// Turns berth events (docs/api.md "Events": the harness's stream-json lines and berth's own)
// into the conversation's rows: user and assistant bubbles, one collapsed row per tool call
// or tool result, errors, notes.
import type { BerthEvent, BoxView } from "./api";
import { h } from "./dom";
import { renderMarkdown, wikiLinks } from "./markdown";
import { LogWindow } from "./log_window";
import { StreamedAnswer } from "./streamed_answer";

export interface Timeline {
  add(ev: BerthEvent, live: boolean): void;
  error(text: string): void;
  /**
   * A message of ours (`id`: the id it is posted with) not yet seen in the events; removed
   * when the `user` event that replays it comes.
   */
  pending(id: string, content: string, onMatched: () => void): HTMLElement;
  historyDone(): void;
}

interface Hooks {
  onState(state: BoxView["state"], reason: string | null, live: boolean): void;
  onTurnEnd(): void;
}

type Block = { type?: string; text?: string; name?: string; input?: unknown; content?: unknown; is_error?: boolean };

function blocksOf(content: unknown): Block[] {
  if (typeof content === "string") return [{ type: "text", text: content }];
  return Array.isArray(content) ? (content as Block[]) : [];
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  return blocksOf(content)
    .map((b) => (b.type === "text" ? b.text ?? "" : ""))
    .join("");
}

function pretty(value: unknown): string {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function summaryOfInput(input: unknown): string {
  if (input && typeof input === "object") {
    const o = input as Record<string, unknown>;
    const first = o.command ?? o.file_path ?? o.path ?? o.pattern ?? o.url ?? o.description;
    if (typeof first === "string") return first.length > 60 ? `${first.slice(0, 60)}…` : first;
  }
  return "";
}

export function renderTimeline(log: HTMLElement, box: string, hooks: Hooks): Timeline {
  const links = wikiLinks(box);
  const waiting: { id: string; content: string; el: HTMLElement; onMatched: () => void }[] = [];
  let streaming: StreamedAnswer | null = null;
  // While an answer streams in, the log is busy: assistive technology waits for the
  // whole answer instead of announcing every piece.
  const setStreaming = (answer: StreamedAnswer | null): void => {
    streaming = answer;
    if (answer) log.setAttribute("aria-busy", "true");
    else log.removeAttribute("aria-busy");
  };

  const rows = new LogWindow(log);
  let loadingHistory = true;
  // The event the rows being added come from: its first row carries `data-seq`.
  let seqToMark: number | null = null;
  const nearBottom = (): boolean => log.scrollHeight - log.scrollTop - log.clientHeight < 80;
  const push = (el: HTMLElement): void => {
    const stick = nearBottom();
    if (seqToMark !== null) {
      el.dataset.seq = String(seqToMark);
      seqToMark = null;
    }
    // Rows of ours still waiting stay last, after what berth has already recorded.
    const firstWaiting = waiting[0]?.el;
    if (firstWaiting && firstWaiting.parentElement === log) log.insertBefore(el, firstWaiting);
    else log.append(el);
    if (stick || loadingHistory) rows.trim();
    if (stick) el.scrollIntoView({ block: "end" });
  };

  const bubble = (who: "user" | "assistant", text: string): HTMLElement =>
    h("article", { class: `msg ${who}`, "aria-label": who === "user" ? "You" : "Agent" }, who === "user" ? h("p", null, text) : renderMarkdown(text, links));

  const tool = (label: string, detail: string, body: string, isError = false): HTMLElement =>
    h(
      "details",
      { class: isError ? "tool tool-error" : "tool" },
      h("summary", null, h("span", { class: "tool-label" }, label), detail ? h("span", { class: "tool-detail" }, detail) : null),
      h("pre", null, body),
    );

  const errorRow = (text: string): HTMLElement => h("p", { class: "row-error", role: "note" }, text);

  const user = (ev: BerthEvent): void => {
    const data = ev.data as { message?: { content?: unknown } };
    const content = data.message?.content;
    const text = textOf(content);
    if (text) {
      // The replay names the message it replays; one from a berth-init too old to say is
      // matched by its text. Text alone mistakes another sender's same words for ours.
      const replays = ev.data.message_id;
      const i = typeof replays === "string" ? waiting.findIndex((w) => w.id === replays) : waiting.findIndex((w) => w.content === text);
      if (i >= 0) {
        const [w] = waiting.splice(i, 1);
        w!.el.remove();
        w!.onMatched();
      }
      push(bubble("user", text));
    }
    for (const b of blocksOf(content)) {
      if (b.type === "tool_result") {
        const body = typeof b.content === "string" ? b.content : blocksOf(b.content).map((c) => c.text ?? pretty(c)).join("\n");
        push(tool(b.is_error ? "Tool error" : "Tool result", body.split("\n")[0]?.slice(0, 60) ?? "", body, !!b.is_error));
      }
    }
  };

  const assistant = (ev: BerthEvent): void => {
    const data = ev.data as { message?: { content?: unknown } };
    if (streaming) {
      streaming.el.remove();
      setStreaming(null);
    }
    for (const b of blocksOf(data.message?.content)) {
      if (b.type === "text" && b.text) push(bubble("assistant", b.text));
      else if (b.type === "tool_use") push(tool(`Tool: ${b.name ?? "?"}`, summaryOfInput(b.input), pretty(b.input)));
    }
  };

  // Claude Code's partial messages (--include-partial-messages): text as it is written.
  const partial = (ev: BerthEvent): void => {
    const e = (ev.data as { event?: { type?: string; delta?: { type?: string; text?: string } } }).event;
    if (e?.type !== "content_block_delta" || e.delta?.type !== "text_delta" || !e.delta.text) return;
    let answer = streaming;
    if (!answer) {
      answer = new StreamedAnswer(links);
      setStreaming(answer);
      push(answer.el);
    }
    answer.append(e.delta.text);
  };

  const result = (ev: BerthEvent): void => {
    const data = ev.data as { is_error?: boolean; subtype?: string; result?: unknown };
    if (data.is_error || (data.subtype && data.subtype !== "success")) {
      push(errorRow(`The agent stopped with an error: ${typeof data.result === "string" && data.result ? data.result : data.subtype ?? "unknown"}`));
    }
    // A turn that ended without its complete answer keeps what streamed, no longer busy.
    if (streaming) setStreaming(null);
    hooks.onTurnEnd();
  };

  const state = (ev: BerthEvent, live: boolean): void => {
    const data = ev.data as { state?: BoxView["state"]; reason?: string | null };
    if (!data.state) return;
    if (data.state === "failed") push(errorRow(`The box failed: ${data.reason ?? "no reason given"}`));
    hooks.onState(data.state, data.reason ?? null, live);
  };

  return {
    add(ev, live) {
      seqToMark = ev.seq;
      switch (ev.type) {
        case "user":
          return user(ev);
        case "assistant":
          return assistant(ev);
        case "stream_event":
          return partial(ev);
        case "result":
          return result(ev);
        case "state":
          return state(ev, live);
        case "harness_failed":
          return push(errorRow(`The agent could not run: ${pretty((ev.data as { reason?: unknown }).reason ?? ev.data)}`));
        case "error":
          return push(errorRow(`Error: ${pretty(ev.data)}`));
        case "gap": {
          const gap = ev.data as { first?: number; last?: number };
          return push(h("p", { class: "row-note" }, `Older events ${gap.first ?? "?"}–${gap.last ?? "?"} were pruned.`));
        }
        default:
          return; // system, log, harness_start, harness_exit: not part of the conversation
      }
    },
    error(text) {
      push(errorRow(text));
    },
    pending(id, content, onMatched) {
      const el = bubble("user", content);
      el.classList.add("pending");
      log.append(el);
      waiting.push({ id, content, el, onMatched });
      el.scrollIntoView({ block: "end" });
      return el;
    },
    historyDone() {
      loadingHistory = false;
      log.scrollTop = log.scrollHeight;
    },
  };
}
