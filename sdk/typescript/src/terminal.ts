/**
 * A terminal in a box: `GET /v1/boxes/{ref}/pty` upgraded to a WebSocket, binary frames
 * for the terminal's bytes both ways and JSON text frames for control (docs/api.md,
 * "Terminals"): from the server a `{"id","offset"}` hello, then at the end one of
 * `{"exit":{"code"}}`, `{"detached":…}` or `{"error":…}`.
 */

import { BerthError, errorFor } from "./errors.js";
import { BoxUser, Command, argv, boxPath, signalName } from "./paths.js";
import { Socket, socketUrl } from "./socket.js";
import type { Target } from "./transport.js";

export interface TerminalOptions {
  cols?: number;
  rows?: number;
  /** Default: the user's login shell. */
  cmd?: Command;
  user?: BoxUser;
  cwd?: string;
  env?: Record<string, string>;
  /** Seconds the terminal outlives its connection, to be reattached (default 60). */
  graceS?: number;
  /**
   * A terminal to take up again from where its reading stopped (its `id` and `offset`):
   * nothing lost or repeated within its grace.
   */
  attach?: { id: string; offset?: number };
}

/** The query of a new terminal, or of a reattach. */
export function ptyParams(options: TerminalOptions): Array<[string, string]> {
  const params: Array<[string, string]> = [
    ["cols", String(options.cols ?? 80)],
    ["rows", String(options.rows ?? 24)],
  ];
  if (options.attach) {
    params.push(["id", options.attach.id]);
    if (options.attach.offset !== undefined) params.push(["offset", String(options.attach.offset)]);
    return params;
  }
  if (options.cmd !== undefined) for (const part of argv(options.cmd)) params.push(["cmd", part]);
  if (options.user !== undefined) params.push(["user", options.user]);
  if (options.cwd !== undefined) params.push(["cwd", options.cwd]);
  if (options.graceS !== undefined) params.push(["grace_s", String(options.graceS)]);
  for (const [key, value] of Object.entries(options.env ?? {})) params.push(["env", `${key}=${value}`]);
  return params;
}

/**
 * An attached terminal: `write` keys, `resize` the window, `signal` its foreground job,
 * and iterate `read()` for the screen's bytes until the program exits (then `exitCode` is
 * set) or another client attaches (`detached` says why). `id` and `offset` (of the next
 * byte to read) reattach with `box.terminal({attach: terminal})`.
 */
export class Terminal {
  exitCode: number | null = null;
  detached: unknown = null;

  private constructor(
    private readonly socket: Socket,
    readonly id: string,
    public offset: number,
  ) {}

  /** Connects and reads the hello; a refusal throws the API's error. */
  static async open(target: Target, ref: string, options: TerminalOptions): Promise<Terminal> {
    const url = socketUrl(target, boxPath(ref, "pty"));
    for (const [key, value] of ptyParams(options)) url.searchParams.append(key, value);
    const socket = await Socket.open(url.toString(), target.apiKey);
    const hello = await socket.next();
    if (hello === null || !("text" in hello)) {
      socket.close();
      throw new BerthError("the terminal did not say hello");
    }
    const control = JSON.parse(hello.text);
    if (typeof control.id !== "string") {
      socket.close();
      const error = control.error;
      throw error ? errorFor(error.code ?? "unknown", error.message ?? "") : new BerthError(`the terminal did not say hello: ${hello.text}`);
    }
    return new Terminal(socket, control.id, control.offset);
  }

  /** Keys in: text as UTF-8, or bytes. */
  write(data: string | Uint8Array): void {
    this.socket.send(typeof data === "string" ? new TextEncoder().encode(data) : data);
  }

  /** A new window size (the program gets `SIGWINCH`). */
  resize(cols: number, rows: number): void {
    this.socket.send(JSON.stringify({ resize: { cols, rows } }));
  }

  /** A signal (`INT`, `TERM`, …) to the terminal's foreground job. */
  signal(signal: string): void {
    this.socket.send(JSON.stringify({ signal: signalName(signal) }));
  }

  /**
   * The terminal's output as it comes, until its end. Leaving the loop early keeps the
   * terminal: the next `read()` goes on where this one stopped.
   */
  async *read(): AsyncGenerator<Uint8Array> {
    while (this.exitCode === null && this.detached === null) {
      const frame = await this.socket.next();
      if (frame === null) return;
      if ("bytes" in frame) {
        this.offset += frame.bytes.length;
        yield frame.bytes;
      } else {
        this.control(frame.text);
      }
    }
  }

  /** Leaves the terminal (it lives on for its grace, to be reattached). */
  close(): void {
    this.socket.close();
  }

  private control(text: string): void {
    const control = JSON.parse(text);
    if (control.exit) this.exitCode = control.exit.code;
    else if (control.detached) this.detached = control.detached;
    else if (control.error) throw errorFor(control.error.code ?? "unknown", control.error.message ?? "");
  }
}
