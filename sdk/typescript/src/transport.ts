/**
 * Sending calls to the daemon with `fetch`, and turning error answers into errors (a
 * failed start into {@link BoxFailed}, with the box's reason). Works the same in Node
 * (18 or newer: its global `fetch`) and in browsers.
 */

import { BerthError, BoxFailed, Failure, Timeout, Unavailable, errorFrom } from "./errors.js";
import { UploadAnswer, UploadFailed, UploadSource, nodeUpload } from "./node_upload.js";
import { boxPath } from "./paths.js";

/** What a streamed upload may be: whole bytes, or chunks as they come. */
export type Body =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | Iterable<Uint8Array>
  | AsyncIterable<Uint8Array>;

/**
 * One call: its method, path and query, a JSON body or raw bytes, extra headers, the box
 * it is about (its errors may be a failed start), and whether its answer may take as long
 * as the box's program (`unbounded`: no timeout).
 */
export interface Call {
  method: string;
  path: string;
  params?: Array<[string, string]>;
  json?: unknown;
  body?: Body;
  headers?: Record<string, string>;
  box?: string;
  unbounded?: boolean;
}

export interface Target {
  /** The daemon's base URL, without a trailing `/`. */
  url: string;
  /** The API key; absent in a browser signed in with berth's session cookie. */
  apiKey: string | undefined;
}

/** True in Node (and runtimes that mimic it), where files and `ws` are at hand. */
export const inNode =
  typeof process !== "undefined" && typeof process.versions?.node === "string";

export class Transport {
  constructor(
    readonly target: Target,
    /** The bound of each call that is not a stream or a command, in milliseconds. */
    readonly timeoutMs: number,
  ) {}

  /** The whole answer of a call, its body read; an error answer thrown. */
  async send(call: Call): Promise<Response> {
    const controller = new AbortController();
    const timer = call.unbounded
      ? undefined
      : setTimeout(() => controller.abort(), this.timeoutMs);
    try {
      const response = await this.open(call, controller.signal);
      // Read the body under the same timer, so a stalled answer cannot hang the caller.
      const bytes = new Uint8Array(await response.arrayBuffer());
      return new Response(response.status === 204 ? null : bytes, {
        status: response.status,
        headers: response.headers,
      });
    } catch (error) {
      if (controller.signal.aborted && !(error instanceof BerthError)) {
        throw new Timeout(`berth did not answer ${call.method} ${call.path} within ${this.timeoutMs} ms`, {
          code: "timeout",
        });
      }
      throw error;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The JSON of a call's answer. */
  async json<T>(call: Call): Promise<T> {
    return (await (await this.send(call)).json()) as T;
  }

  /**
   * An answer whose body is read as it comes; `signal` aborts it (for an exec, that
   * kills the process). The caller reads `body` and cancels it when done.
   */
  async stream(call: Call, signal: AbortSignal): Promise<ReadableStream<Uint8Array>> {
    const response = await this.open(call, signal);
    if (!response.body) throw new BerthError(`${call.method} ${call.path} answered no body`);
    return response.body;
  }

  /**
   * The answer as it came, whatever its status: a box's port answers with its app's own
   * statuses, which are the caller's to read, not berth's errors. Its body is unread.
   */
  async passThrough(call: Call, signal: AbortSignal): Promise<Response> {
    return this.request(call, signal);
  }

  /**
   * The answer of a call, its headers read and its body not yet: an error answer thrown.
   * `signal` aborts it; the caller reads the body and cancels it when done.
   */
  async open(call: Call, signal: AbortSignal): Promise<Response> {
    const response = await this.request(call, signal);
    if (!response.ok) throw await this.error(call, response.status, await response.text());
    return response;
  }

  /**
   * The whole answer of a call that sends `body`, read even when the daemon answers before
   * the body is all sent: it refuses some uploads as soon as it has read their start (a
   * restore's taken name) and closes the connection. Node's `fetch` sends a body whole
   * before it reads the answer (half duplex, the fetch standard), so it would lose that
   * answer to a failed write ("fetch failed (write EPIPE)"): in Node the body goes out with
   * `node:http(s)` instead (`node_upload.ts`), which reads the answer as it comes and stops
   * sending then. The daemon's close can still beat its answer to the reader; with
   * `probeBytes`, a connection lost before the body was all sent is asked again with the
   * body's first `probeBytes` (kept as they went), which the daemon refuses the same way
   * (an answer about that start being cut short says nothing: the first failure is thrown).
   * Elsewhere (a browser reads early answers itself), this is {@link send}.
   */
  async upload(call: Call, options: { probeBytes?: number } = {}): Promise<Response> {
    if (!inNode || call.body === undefined || call.json !== undefined) return this.send(call);
    const start = new BodyStart(options.probeBytes ?? 0);
    let answer: UploadAnswer;
    try {
      answer = await this.nodeUpload(call, start.record(uploadSource(call.body)));
    } catch (error) {
      if (!(error instanceof UploadFailed)) throw error; // the caller's own (its chunks failed), or a timeout
      const lost = new Unavailable(`cannot reach berth at ${this.target.url}: ${describe(error.cause)}`, {
        code: "unavailable",
      });
      if (error.bodySent || start.bytes.length === 0) throw lost;
      try {
        answer = await this.nodeUpload(call, { length: start.bytes.length, chunks: once(start.bytes) });
      } catch {
        throw lost;
      }
      if (answer.status === 400 && !start.whole) throw lost;
    }
    if (answer.status < 200 || answer.status > 299) {
      throw await this.error(call, answer.status, new TextDecoder().decode(answer.body));
    }
    return new Response(answer.status === 204 ? null : (answer.body as Uint8Array<ArrayBuffer>), {
      status: answer.status,
      headers: answer.headers,
    });
  }

  private nodeUpload(call: Call, source: UploadSource): Promise<UploadAnswer> {
    return nodeUpload(this.url(call), call.method, this.headers(call), source, {
      timeoutMs: call.unbounded ? undefined : this.timeoutMs,
      timedOut: () =>
        new Timeout(`berth did not answer ${call.method} ${call.path} within ${this.timeoutMs} ms`, {
          code: "timeout",
        }),
    });
  }

  private url(call: Call): URL {
    const url = new URL(this.target.url + call.path);
    for (const [key, value] of call.params ?? []) url.searchParams.append(key, value);
    return url;
  }

  private headers(call: Call): Record<string, string> {
    const headers: Record<string, string> = { ...call.headers };
    if (this.target.apiKey) {
      // The key wins over a caller's own (a port request's), whatever its case: two would
      // be joined into one header that neither berth nor the app reads.
      for (const name of Object.keys(headers)) if (name.toLowerCase() === "authorization") delete headers[name];
      headers["Authorization"] = `Bearer ${this.target.apiKey}`;
    }
    return headers;
  }

  private async request(call: Call, signal: AbortSignal): Promise<Response> {
    const url = this.url(call);
    const headers = this.headers(call);
    const init: RequestInit & { duplex?: "half" } = { method: call.method, headers, signal };
    if (call.json !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(call.json);
    }
    // What went wrong reading a streamed body (the caller's chunks), which fetch only
    // reports as "fetch failed": the caller's own error is thrown instead.
    const failed: { error?: unknown } = {};
    if (call.json === undefined && call.body !== undefined) {
      init.body = await requestBody(call.body, failed);
      // A streamed request body must say so (the fetch standard; Node's fetch insists).
      if (init.body instanceof ReadableStream) init.duplex = "half";
    }
    try {
      return await fetch(url, init);
    } catch (error) {
      if (failed.error !== undefined) throw failed.error;
      if (signal.aborted) throw error;
      throw new Unavailable(`cannot reach berth at ${this.target.url}: ${describe(error)}`, {
        code: "unavailable",
      });
    }
  }

  private async error(call: Call, status: number, body: string): Promise<BerthError> {
    const error = errorFrom(status, body);
    if (!(error instanceof Unavailable) || call.box === undefined) return error;
    // A `503` on a box's call is a failed start when the box is now `failed`: the API says
    // so only in the box's state, looked up here.
    try {
      const box = await this.json<{ state: string; state_reason?: string | null; failure?: Failure | null }>({
        method: "GET",
        path: boxPath(call.box),
      });
      if (box.state === "failed") {
        return new BoxFailed(error.message, box.state_reason ?? null, box.failure ?? null, status);
      }
    } catch {
      // the box cannot be looked up: the plain error
    }
    return error;
  }
}

/** Why a fetch failed, with Node's cause (`ECONNREFUSED`, …) when it has one. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = (error as { cause?: unknown }).cause;
  return cause instanceof Error ? `${error.message} (${cause.message})` : error.message;
}

/**
 * A request body: whole values as they are; chunks as a stream in Node, collected into a
 * `Blob` in browsers (most stream request bodies only over HTTP/2, which berth does not
 * serve itself).
 */
async function requestBody(body: Body, failed: { error?: unknown }): Promise<BodyInit> {
  if (typeof body === "string" || body instanceof ArrayBuffer || body instanceof Blob) return body;
  // A view of a plain (not shared) buffer, as every byte source here makes.
  if (body instanceof Uint8Array) return body as Uint8Array<ArrayBuffer>;
  const iterator = chunksOf(body);
  if (!inNode) {
    const parts: Uint8Array[] = [];
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) parts.push(asBytes(next.value));
    return new Blob(parts as BlobPart[]);
  }
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await iterator.next();
        if (next.done) controller.close();
        else controller.enqueue(asBytes(next.value));
      } catch (error) {
        failed.error = error;
        controller.error(error);
      }
    },
    async cancel() {
      await iterator.return?.();
    },
  });
}

/** A body for {@link nodeUpload}: whole values with their length, else their chunks. */
function uploadSource(body: Body): UploadSource {
  const whole = (bytes: Uint8Array): UploadSource => ({ length: bytes.length, chunks: once(bytes) });
  if (typeof body === "string") return whole(new TextEncoder().encode(body));
  if (body instanceof ArrayBuffer) return whole(new Uint8Array(body));
  if (body instanceof Uint8Array) return whole(body);
  if (body instanceof Blob) return { length: body.size, chunks: readBlob(body) };
  const iterator = chunksOf(body);
  return {
    chunks: {
      [Symbol.asyncIterator]: () => ({
        next: async () => {
          const next = await iterator.next();
          return next.done ? { done: true, value: undefined } : { done: false, value: asBytes(next.value) };
        },
        return: async () => {
          await iterator.return?.();
          return { done: true, value: undefined };
        },
      }),
    },
  };
}

/**
 * The first `limit` bytes of a body, kept as its chunks go out (for `upload`'s second
 * asking); `whole` once the body ended within them.
 */
class BodyStart {
  private readonly parts: Uint8Array[] = [];
  private kept = 0;
  whole = false;

  constructor(private readonly limit: number) {}

  get bytes(): Uint8Array {
    const bytes = new Uint8Array(this.kept);
    let at = 0;
    for (const part of this.parts) {
      bytes.set(part, at);
      at += part.length;
    }
    return bytes;
  }

  record(source: UploadSource): UploadSource {
    if (this.limit <= 0) return source;
    const start = this;
    async function* chunks(): AsyncGenerator<Uint8Array> {
      let total = 0;
      for await (const chunk of source.chunks) {
        total += chunk.length;
        if (start.kept < start.limit) {
          const part = chunk.slice(0, start.limit - start.kept);
          start.parts.push(part);
          start.kept += part.length;
        }
        yield chunk;
      }
      start.whole = total === start.kept;
    }
    return { length: source.length, chunks: chunks() };
  }
}

async function* once(bytes: Uint8Array): AsyncGenerator<Uint8Array> {
  yield bytes;
}

async function* readBlob(blob: Blob): AsyncGenerator<Uint8Array> {
  const reader = blob.stream().getReader();
  try {
    for (let next = await reader.read(); !next.done; next = await reader.read()) yield next.value;
  } finally {
    reader.cancel().catch(() => {});
  }
}

const BODY_TYPES = "a string, bytes (Uint8Array, ArrayBuffer), a Blob, or an (async) iterable of byte chunks";

function chunksOf(body: unknown): Iterator<unknown> | AsyncIterator<unknown> {
  if (body !== null && typeof body === "object") {
    if (Symbol.asyncIterator in body) return (body as AsyncIterable<unknown>)[Symbol.asyncIterator]();
    if (Symbol.iterator in body) return (body as Iterable<unknown>)[Symbol.iterator]();
  }
  throw new TypeError(`data to send is ${BODY_TYPES}, not ${typeof body}`);
}

/** One chunk of a streamed body: bytes (a Node `Buffer` is some), or text as UTF-8. */
function asBytes(chunk: unknown): Uint8Array {
  if (chunk instanceof Uint8Array) return chunk;
  if (typeof chunk === "string") return new TextEncoder().encode(chunk);
  throw new TypeError(`a chunk of data to send is bytes (Uint8Array) or text, not ${typeof chunk}`);
}
