/**
 * Reading answers as they come: bytes, NDJSON lines and server-sent events from a fetch
 * body. Each reader cancels the body when its loop ends early (a `break`, an error), so
 * the daemon sees the stream closed at once and frees its slot (docs/api.md, "Streams").
 */

import { StreamCut, cut } from "./errors.js";

/**
 * The body's chunks. A connection cut mid-way throws {@link StreamCut}; a body that ends
 * cleanly but early (an NDJSON stream without its last frame) is the caller's to notice.
 */
export async function* readChunks(body: ReadableStream<Uint8Array>): AsyncGenerator<Uint8Array> {
  const reader = body.getReader();
  try {
    for (;;) {
      let next: ReadableStreamReadResult<Uint8Array>;
      try {
        next = await reader.read();
      } catch {
        throw cut("the answer");
      }
      if (next.done) return;
      if (next.value.length > 0) yield next.value;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** The body's lines (UTF-8, without their `\n` or `\r\n`), blank ones included. */
export async function* readLines(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of readChunks(body)) {
    pending += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = pending.indexOf("\n")) >= 0) {
      const line = pending.slice(0, end);
      pending = pending.slice(end + 1);
      yield line.endsWith("\r") ? line.slice(0, -1) : line;
    }
  }
  // A last line without its newline is a cut frame: dropped, never half-parsed.
}

/** The JSON of each line that holds one (blank lines are keep-alives). */
export async function* readFrames(body: ReadableStream<Uint8Array>): AsyncGenerator<any> {
  for await (const line of readLines(body)) {
    if (line.trim()) yield JSON.parse(line);
  }
}

/**
 * Server-sent events: each whole event's `data:` lines as one JSON value; comments (the
 * keep-alives) and the other fields are skipped (an event's seq and type are in its JSON).
 */
export async function* readServerEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<any> {
  let data: string[] = [];
  for await (const line of readLines(body)) {
    if (line === "") {
      if (data.length > 0) yield JSON.parse(data.join("\n"));
      data = [];
    } else if (line.startsWith("data:")) {
      const value = line.slice(5);
      data.push(value.startsWith(" ") ? value.slice(1) : value);
    }
  }
}

/**
 * How many times in a row a resumable stream (a process's output, the event log) was cut
 * without bringing anything: past {@link Reconnects.MAX}, the reader gives up, since the
 * daemon keeps closing it.
 */
export class Reconnects {
  static readonly MAX = 5;
  private cuts = 0;

  constructor(private readonly what: string) {}

  progress(): void {
    this.cuts = 0;
  }

  /** The stream ended before its end: resume, unless it keeps happening. */
  cut(): void {
    this.cuts += 1;
    if (this.cuts > Reconnects.MAX) throw cut(this.what);
  }
}

/** Whether `error` is a cut connection, which a resumable stream's reader resumes after. */
export function isCut(error: unknown): boolean {
  return error instanceof StreamCut;
}
