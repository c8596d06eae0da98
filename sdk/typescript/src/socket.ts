/**
 * One WebSocket, the same whichever implementation carries it. The global `WebSocket` when
 * there is one (browsers, Node 22 and newer): in Node it sends the API key as a header
 * (undici's WebSocket takes `headers`), in a browser berth's session cookie signs it in (a
 * browser cannot set a header, and berth never takes a key in a URL). Else the `ws`
 * package, imported when first needed. Frames wait in a queue until read, so none is lost
 * between two reads.
 */

import { BerthError, errorFrom } from "./errors.js";
import { type Target, inNode } from "./transport.js";

/** The WebSocket URL of an API path: the daemon's URL as `ws:` or `wss:`. */
export function socketUrl(target: Target, path: string): URL {
  const url = new URL(target.url + path);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url;
}

/** A frame: `text` for a text frame, else `bytes`. */
export type Frame = { text: string } | { bytes: Uint8Array };

export class Socket {
  private readonly queue: Frame[] = [];
  private waiting: (() => void) | undefined;
  private closed = false;

  constructor(
    private readonly sendFrame: (data: string | Uint8Array) => void,
    private readonly closeSocket: () => void,
  ) {}

  /** Connects; a refusal before the upgrade throws the API's error. */
  static async open(url: string, apiKey: string | undefined): Promise<Socket> {
    if (typeof WebSocket === "undefined") return openWs(url, apiKey);
    try {
      return await openStandard(url, apiKey);
    } catch (refused) {
      if (!inNode) throw refused;
      // The standard WebSocket hides why an upgrade was refused (no status, no body); `ws`
      // reads the API's error answer. The refused attempt changed nothing, so try again.
      return openWs(url, apiKey);
    }
  }

  send(data: string | Uint8Array): void {
    if (this.closed) throw new BerthError("the WebSocket is closed");
    this.sendFrame(data);
  }

  /** The next frame, or `null` once the socket closed and every frame was read. */
  async next(): Promise<Frame | null> {
    while (this.queue.length === 0) {
      if (this.closed) return null;
      await new Promise<void>((resolve) => (this.waiting = resolve));
    }
    return this.queue.shift()!;
  }

  close(): void {
    if (!this.closed) this.closeSocket();
    this.ended();
  }

  /** A frame came (the opener's handler). */
  receive(frame: Frame): void {
    this.queue.push(frame);
    this.wake();
  }

  /** The connection ended (the opener's handler). */
  ended(): void {
    this.closed = true;
    this.wake();
  }

  private wake(): void {
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.();
  }
}

async function openWs(url: string, apiKey: string | undefined): Promise<Socket> {
  const { default: WebSocket } = await import("ws");
  const headers: Record<string, string> = apiKey ? { Authorization: `Bearer ${apiKey}` } : {};
  const ws = new WebSocket(url, { headers });
  const socket = new Socket(
    (data) => ws.send(data),
    () => ws.close(),
  );
  ws.on("message", (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    socket.receive(isBinary ? { bytes: new Uint8Array(bytes) } : { text: bytes.toString("utf-8") });
  });
  ws.on("close", () => socket.ended());
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("unexpected-response", (_request, response) => {
      // Refused before the upgrade: the API's error answer, read whole.
      const parts: Buffer[] = [];
      response.on("data", (part: Buffer) => parts.push(part));
      response.on("end", () => {
        reject(errorFrom(response.statusCode ?? 0, Buffer.concat(parts).toString("utf-8")));
        ws.terminate();
      });
    });
    ws.once("error", (error: Error) => reject(new BerthError(`cannot open the WebSocket at ${url}: ${error.message}`)));
  });
  ws.on("error", () => socket.ended()); // after the open: the close that follows ends the reads
  return socket;
}

async function openStandard(url: string, apiKey: string | undefined): Promise<Socket> {
  // `headers` is undici's (Node's) extension of the standard constructor; a browser would
  // take the object for a subprotocol's name, so it gets none.
  const ws =
    inNode && apiKey
      ? new (WebSocket as unknown as new (url: string, init: object) => WebSocket)(url, {
          headers: { Authorization: `Bearer ${apiKey}` },
        })
      : new WebSocket(url);
  ws.binaryType = "arraybuffer";
  const socket = new Socket(
    (data) => ws.send(data),
    () => ws.close(),
  );
  ws.onmessage = (message) => {
    socket.receive(typeof message.data === "string" ? { text: message.data } : { bytes: new Uint8Array(message.data) });
  };
  await new Promise<void>((resolve, reject) => {
    ws.onopen = () => resolve();
    // The standard API hides why an upgrade was refused: only that it was. Some
    // implementations (Node's) fire only `error` then, others only `close`.
    const refused = (how: string) => {
      socket.ended();
      reject(new BerthError(`the WebSocket at ${url} was refused (${how})`));
    };
    ws.onerror = () => refused("error");
    ws.onclose = (close) => refused(`closed, code ${close.code}`);
  });
  ws.onclose = () => socket.ended();
  return socket;
}
