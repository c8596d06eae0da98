/**
 * A background process of a box: its output from any offset, resumed across cut
 * connections, its stdin, signals and exit (docs/api.md, "Background processes").
 */

import { OutputChunk, ProcessExit, ProcessInfo, processExit } from "./models.js";
import { boxPath, fromBase64, signalName } from "./paths.js";
import { Reconnects, isCut, readFrames } from "./streams.js";
import type { Body, Transport } from "./transport.js";

/**
 * A process started with `box.spawn(…)` (or found by `box.processes()`). `offset` is
 * where the next `output()` starts: past what this handle has read so far.
 */
export class Process {
  offset = 0;
  exit: ProcessExit | null;

  constructor(
    private readonly transport: Transport,
    private readonly box: string,
    readonly info: ProcessInfo,
  ) {
    this.exit = info.exit ? processExit(info.exit) : null;
  }

  get id(): string {
    return this.info.id;
  }

  get pid(): number {
    return this.info.pid;
  }

  /**
   * The output from `offset` (default: where this handle's reading stopped) to the
   * process's exit, as it comes. A cut connection is resumed from the last offset read,
   * nothing lost or repeated; leaving the loop early and calling `output()` again goes on
   * from there too.
   */
  async *output(offset?: number): AsyncGenerator<OutputChunk> {
    let at = offset ?? this.offset;
    let exit: ProcessExit | null = null;
    const reconnects = new Reconnects("the process's output stream");
    while (exit === null) {
      const controller = new AbortController();
      try {
        const body = await this.transport.stream(
          {
            method: "GET",
            path: boxPath(this.box, "processes", this.id, "output"),
            params: [["offset", String(at)]],
            box: this.box,
            unbounded: true,
          },
          controller.signal,
        );
        for await (const frame of readFrames(body)) {
          if (frame.type === "exit") {
            exit = processExit(frame);
          } else if (frame.type === "output") {
            // A chunk past the asked offset means older output is no longer kept.
            const chunk = new OutputChunk(frame.stream, frame.offset, fromBase64(frame.data));
            at = chunk.end;
            this.offset = at;
            reconnects.progress();
            yield chunk;
          }
        }
      } catch (error) {
        if (!isCut(error)) throw error;
      } finally {
        controller.abort();
      }
      if (exit === null) reconnects.cut();
    }
    this.exit = exit;
  }

  /** Waits for the process to exit (reading, not keeping, the output left). */
  async wait(): Promise<ProcessExit> {
    for await (const _ of this.output()) {
      // the output is skipped
    }
    return this.exit!;
  }

  /**
   * Writes `data` to the process's stdin (it must have been spawned with `openStdin`), as
   * fast as it reads; `close` closes stdin after.
   */
  async writeStdin(data: Body, options: { close?: boolean } = {}): Promise<void> {
    await this.transport.send({
      method: "POST",
      path: boxPath(this.box, "processes", this.id, "stdin"),
      params: options.close ? [["close", "true"]] : [],
      body: data,
      headers: { "Content-Type": "application/octet-stream" },
      box: this.box,
      unbounded: true,
    });
  }

  async closeStdin(): Promise<void> {
    await this.writeStdin(new Uint8Array(0), { close: true });
  }

  /** Sends `signal` (`TERM`, `INT`, `HUP`, …) to the process's group. */
  async signal(signal: string): Promise<void> {
    await this.transport.send({
      method: "POST",
      path: boxPath(this.box, "processes", this.id, "signal"),
      json: { signal: signalName(signal) },
      box: this.box,
    });
  }

  /** `KILL` to the process's group. */
  async kill(): Promise<void> {
    await this.signal("KILL");
  }
}
