/**
 * Sending calls to the daemon with `fetch`, and turning error answers into errors (a
 * failed start into {@link BoxFailed}, with the box's reason). Works the same in Node
 * (18 or newer: its global `fetch`) and in browsers.
 */

import { BerthError, BoxFailed, Failure, Timeout, Unavailable, errorFrom } from "./errors.js";
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

  private async request(call: Call, signal: AbortSignal): Promise<Response> {
    const url = new URL(this.target.url + call.path);
    for (const [key, value] of call.params ?? []) url.searchParams.append(key, value);
    const headers: Record<string, string> = { ...call.headers };
    if (this.target.apiKey) {
      // The key wins over a caller's own (a port request's), whatever its case: two would
      // be joined into one header that neither berth nor the app reads.
      for (const name of Object.keys(headers)) if (name.toLowerCase() === "authorization") delete headers[name];
      headers["Authorization"] = `Bearer ${this.target.apiKey}`;
    }
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
