/**
 * Talking to a box's agent: a message's turn, read from the box's event log until its
 * `result`, and the log itself, followed live and resumed across cut connections
 * (docs/api.md, "Messages", "Events").
 */

import { Event, EventPage, event } from "./models.js";
import { boxPath } from "./paths.js";
import { Reconnects, isCut, readServerEvents } from "./streams.js";
import type { Transport } from "./transport.js";

/** One page of stored events after seq `after`, without waiting for new ones. */
export async function eventPage(transport: Transport, box: string, after: number): Promise<EventPage> {
  const page = await transport.json<any>({
    method: "GET",
    path: boxPath(box, "events"),
    params: [
      ["after", String(after)],
      ["wait", "false"],
    ],
    box,
  });
  return { events: page.events.map(event), nextAfter: page.next_after, more: page.more, gap: page.gap ?? null };
}

/**
 * Where a message's turn starts in the log, for a daemon too old to answer `events_after`:
 * just before the message's first event (its `user` replay, else its `result`), else the
 * log's end as read now, page by page (the turn then comes after it). Slow on a long log,
 * which is why the daemon now says.
 */
export async function turnStart(transport: Transport, box: string, messageId: string): Promise<number> {
  let after = 0;
  for (;;) {
    const page = await eventPage(transport, box, after);
    const first = page.events.find((next) => next.messageId === messageId);
    if (first !== undefined) return first.seq - 1;
    after = page.nextAfter;
    if (!page.more) return after;
  }
}

/**
 * The box's events after seq `after`, live, reconnecting from the last one seen when the
 * stream is cut (a restarting daemon), for as long as the caller reads.
 */
export async function* followEvents(transport: Transport, box: string, after: number): AsyncGenerator<Event> {
  const reconnects = new Reconnects("the event stream");
  for (;;) {
    const controller = new AbortController();
    try {
      const body = await transport.stream(
        {
          method: "GET",
          path: boxPath(box, "events"),
          params: [["after", String(after)]],
          headers: { Accept: "text/event-stream" },
          box,
          unbounded: true,
        },
        controller.signal,
      );
      for await (const raw of readServerEvents(body)) {
        const next = event(raw);
        after = next.seq;
        reconnects.progress();
        yield next;
      }
    } catch (error) {
      if (!isCut(error)) throw error;
    } finally {
      controller.abort();
    }
    reconnects.cut();
  }
}

/**
 * The answer to one message: iterate it (`for await`) for the turn's events as they come,
 * the last one its `result` (also kept in `result`). `messageId` is the message's id (the
 * key given, else `msg_…`); `seq` its place in the box's queue. A turn of an earlier
 * message still running when this one was posted shows its tail too.
 */
export class Turn implements AsyncIterable<Event> {
  result: Event | null = null;

  constructor(
    private readonly transport: Transport,
    private readonly box: string,
    readonly messageId: string,
    readonly seq: number,
    private after: number,
  ) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<Event> {
    if (this.result !== null) return; // read to its end already
    for await (const next of followEvents(this.transport, this.box, this.after)) {
      this.after = next.seq;
      // Its `result`, or a `turn_timeout` when the harness never answered: kept before it
      // is handed over, so a caller that stops at it still finds the turn ended.
      const last = (next.type === "result" || next.type === "turn_timeout") && next.messageId === this.messageId;
      if (last) this.result = next;
      yield next;
      if (last) return;
    }
  }

  /** Reads the turn to its end; answers its `result`. */
  async wait(): Promise<Event> {
    for await (const _ of this) {
      // the events are skipped
    }
    return this.result!;
  }

  /** The `result`'s text, once the turn ended. */
  get text(): string | null {
    const text = this.result?.data.result;
    return typeof text === "string" ? text : null;
  }
}
