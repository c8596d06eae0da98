/**
 * Running commands in a box: the body of `POST …/exec`, and the fold of a streamed exec's
 * frames (`started`, `stdout`, `stderr`, then `exit` or `error`) into an
 * {@link ExecResult}, each piece of output handed to its callback as it comes.
 */

import { errorFor } from "./errors.js";
import type { ExecResult } from "./models.js";
import { BoxUser, Command, argv, fromBase64 } from "./paths.js";

export interface ExecOptions {
  /** Absolute; default `/home/user`. */
  cwd?: string;
  /** Over the box's own `env`. */
  env?: Record<string, string>;
  user?: BoxUser;
  /** Text fed to the command's stdin (bytes must be UTF-8: the API carries text). */
  stdin?: string | Uint8Array;
  /** Seconds (rounded, at least 1) before the process group is killed; default 60. */
  timeout?: number;
}

export interface StreamedExecOptions extends ExecOptions {
  /** Called with stdout's text as it comes (an awaited promise holds the reading back). */
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
}

export interface SpawnOptions extends ExecOptions {
  /** Keep stdin open for `writeStdin`. */
  openStdin?: boolean;
  /** `false`: the running process does not keep the box awake. */
  keepAwake?: boolean;
}

export function execBody(cmd: Command, options: ExecOptions): Record<string, unknown> {
  const body: Record<string, unknown> = { cmd: argv(cmd) };
  if (options.cwd !== undefined) body.cwd = options.cwd;
  if (options.env !== undefined && Object.keys(options.env).length > 0) body.env = options.env;
  if (options.user !== undefined) body.user = options.user;
  if (options.stdin !== undefined) {
    body.stdin =
      typeof options.stdin === "string"
        ? options.stdin
        : new TextDecoder("utf-8", { fatal: true }).decode(options.stdin);
  }
  if (options.timeout !== undefined) {
    if (!(options.timeout > 0)) throw new TypeError(`timeout must be positive seconds, not ${options.timeout}`);
    body.timeout_s = Math.max(1, Math.round(options.timeout));
  }
  return body;
}

/** An {@link execBody} made a background process's. */
export function spawnBody(cmd: Command, options: SpawnOptions): Record<string, unknown> {
  const body = execBody(cmd, options);
  body.background = true;
  if (options.openStdin) body.open_stdin = true;
  if (options.keepAwake !== undefined) body.keep_awake = options.keepAwake;
  return body;
}

export function execResult(data: any): ExecResult {
  return {
    exitCode: data.exit_code,
    stdout: data.stdout,
    stderr: data.stderr,
    timedOut: Boolean(data.timed_out),
    truncated: Boolean(data.truncated),
  };
}

/**
 * Folds a streamed exec's frames. Bytes are decoded as UTF-8 across frame boundaries (a
 * character may be split between two frames).
 */
export class ExecCollector {
  private readonly decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  private readonly text: { stdout: string[]; stderr: string[] } = { stdout: [], stderr: [] };
  result: ExecResult | undefined;

  constructor(private readonly callbacks: { stdout?: (text: string) => unknown; stderr?: (text: string) => unknown }) {}

  /** Takes one frame; answers what its callback returned (the caller awaits it). */
  feed(frame: any): unknown {
    const kind = frame?.type;
    if (kind === "stdout" || kind === "stderr") {
      const text = this.decoders[kind as "stdout" | "stderr"].decode(fromBase64(frame.data), { stream: true });
      if (!text) return undefined;
      this.text[kind as "stdout" | "stderr"].push(text);
      return this.callbacks[kind as "stdout" | "stderr"]?.(text);
    }
    if (kind === "exit") this.finish(frame);
    else if (kind === "error") throw errorFor(frame.code ?? "unknown", frame.message ?? "");
    return undefined;
  }

  private finish(frame: any): void {
    // What a cut character left behind; its callback is not called for it.
    this.text.stdout.push(this.decoders.stdout.decode());
    this.text.stderr.push(this.decoders.stderr.decode());
    const code = frame.code ?? null;
    this.result = {
      exitCode: code ?? 128 + (frame.signal ?? 0),
      stdout: this.text.stdout.join(""),
      stderr: this.text.stderr.join(""),
      timedOut: Boolean(frame.timed_out),
      truncated: false,
    };
  }
}
