/**
 * One box: its lifecycle verbs, exec and background processes, files, terminals, messages
 * and events, ports and share links. Each call that answers the box updates `info`.
 */

import { ExecCollector, SpawnOptions, StreamedExecOptions, execBody, execResult, spawnBody } from "./exec.js";
import { cut } from "./errors.js";
import { Files } from "./files.js";
import { Turn, eventPage, followEvents } from "./messages.js";
import {
  BoxInfo,
  BoxState,
  Event,
  EventPage,
  ExecResult,
  PortUrls,
  ProcessInfo,
  ShareLink,
  UpdateBoxFields,
  shareLink,
} from "./models.js";
import { Command, boxPath } from "./paths.js";
import { Process } from "./process.js";
import { readFrames } from "./streams.js";
import { Terminal, TerminalOptions } from "./terminal.js";
import type { Call, Transport } from "./transport.js";

export class Box {
  /** The box's files. */
  readonly files: Files;

  constructor(
    private readonly transport: Transport,
    /** The box as last seen (the API's JSON, docs/api.md "Boxes"). */
    public info: BoxInfo,
  ) {
    this.files = new Files(transport, info.id);
  }

  get id(): string {
    return this.info.id;
  }

  get name(): string {
    return this.info.name;
  }

  get state(): BoxState {
    return this.info.state;
  }

  async refresh(): Promise<this> {
    return this.set({ method: "GET", path: boxPath(this.id) });
  }

  /** Starts the box (on `runtime` from now on, when given: it must be stopped). */
  async start(options: { runtime?: string } = {}): Promise<this> {
    return this.verb("start", options.runtime ? { runtime: options.runtime } : undefined);
  }

  async stop(): Promise<this> {
    return this.verb("stop");
  }

  async pause(): Promise<this> {
    return this.verb("pause");
  }

  async resume(): Promise<this> {
    return this.verb("resume");
  }

  async snapshot(): Promise<this> {
    return this.verb("snapshot");
  }

  /**
   * Changes any of `pause_after_s`, `snapshot_after_s`, `stop_after_s`, `auto_resume`,
   * `limits`, `disk_mib`, `labels` (whole), `env` (whole).
   */
  async update(fields: UpdateBoxFields): Promise<this> {
    return this.set({ method: "PATCH", path: boxPath(this.id), json: fields, box: this.id });
  }

  /** Stops the box and deletes it with its volume. */
  async delete(): Promise<void> {
    await this.transport.send({ method: "DELETE", path: boxPath(this.id), box: this.id });
  }

  /**
   * Runs `cmd` (a string through `sh -c`, or an array) to its end, waking the box. With
   * `onStdout`/`onStderr` the output is streamed to them as it comes (and is also in the
   * result). `timeout` (seconds, default 60) kills the process group.
   */
  async exec(cmd: Command, options: StreamedExecOptions = {}): Promise<ExecResult> {
    const body = execBody(cmd, options);
    const call = { method: "POST", path: boxPath(this.id, "exec"), json: body, box: this.id, unbounded: true };
    if (!options.onStdout && !options.onStderr) return execResult(await this.transport.json(call));
    const collector = new ExecCollector({ stdout: options.onStdout, stderr: options.onStderr });
    // Aborting the answer (an early throw, a callback's error) kills the process.
    const controller = new AbortController();
    try {
      const stream = await this.transport.stream(
        { ...call, headers: { Accept: "application/x-ndjson" } },
        controller.signal,
      );
      for await (const frame of readFrames(stream)) {
        await collector.feed(frame);
        if (collector.result) return collector.result;
      }
    } finally {
      controller.abort();
    }
    throw cut("the exec stream");
  }

  /**
   * Starts `cmd` in the background, waking the box: it runs until it exits (or its
   * `timeout`, none by default), whoever watches. `openStdin` keeps its stdin open for
   * `writeStdin`; `keepAwake: false` lets the box sleep while it runs.
   */
  async spawn(cmd: Command, options: SpawnOptions = {}): Promise<Process> {
    const info = await this.transport.json<ProcessInfo>({
      method: "POST",
      path: boxPath(this.id, "exec"),
      json: spawnBody(cmd, options),
      box: this.id,
      unbounded: true,
    });
    return new Process(this.transport, this.id, info);
  }

  /**
   * The box's background processes, running or exited and not yet forgotten (none while
   * the box is not running).
   */
  async processes(): Promise<Process[]> {
    const answer = await this.transport.json<{ processes: ProcessInfo[] }>({
      method: "GET",
      path: boxPath(this.id, "processes"),
      box: this.id,
    });
    return answer.processes.map((info) => new Process(this.transport, this.id, info));
  }

  /**
   * A new terminal running `cmd` (default: the user's login shell), waking the box; or,
   * with `attach`, that terminal again from where its reading stopped.
   */
  async terminal(options: TerminalOptions = {}): Promise<Terminal> {
    return Terminal.open(this.transport.target, this.id, options);
  }

  /**
   * Posts a message to the box's agent (waking the box) and answers its turn: iterate it
   * for the events until its `result`. `id` is an idempotency key: the same key again
   * answers the same message.
   */
  async send(text: string, options: { id?: string } = {}): Promise<Turn> {
    const after = await this.lastEventSeq();
    const body: Record<string, string> = { content: text };
    if (options.id !== undefined) body.id = options.id;
    const posted = await this.transport.json<{ id: string; seq: number }>({
      method: "POST",
      path: boxPath(this.id, "messages"),
      json: body,
      box: this.id,
    });
    return new Turn(this.transport, this.id, posted.id, posted.seq, after);
  }

  /**
   * The box's events after seq `after`, stored ones first, then live as they come, for as
   * long as the loop reads (a cut stream is resumed after the last one seen). Watching
   * does not keep the box awake.
   */
  events(options: { after?: number } = {}): AsyncGenerator<Event> {
    return followEvents(this.transport, this.id, options.after ?? 0);
  }

  /** One page of stored events after seq `after`, without waiting for new ones. */
  async eventPage(options: { after?: number } = {}): Promise<EventPage> {
    return eventPage(this.transport, this.id, options.after ?? 0);
  }

  /** The seq of the newest stored event (0 for none), read page by page. */
  async lastEventSeq(): Promise<number> {
    let after = 0;
    for (;;) {
      const page = await this.eventPage({ after });
      after = page.nextAfter;
      if (!page.more) return after;
    }
  }

  /** Where the box's `port` is reached through berth (does not wake the box). */
  async portUrl(port: number): Promise<PortUrls> {
    const answer = await this.transport.json<any>({
      method: "GET",
      path: boxPath(this.id, "ports"),
      params: [["port", String(port)]],
      box: this.id,
    });
    return { port: answer.port, url: answer.url, hostUrl: answer.host_url ?? null };
  }

  /**
   * A share link to `port` for someone without a key, live for `ttlS` seconds (default an
   * hour); its `url` (with the token) is only in this answer.
   */
  async share(port: number, options: { ttlS?: number } = {}): Promise<ShareLink> {
    const answer = await this.transport.json({
      method: "POST",
      path: boxPath(this.id, "ports", String(port), "links"),
      json: { ttl_s: options.ttlS ?? 3600 },
      box: this.id,
    });
    return shareLink(answer);
  }

  /** The box's share links (of `port`, when given), without their URLs. */
  async links(port?: number): Promise<ShareLink[]> {
    const path = port === undefined ? boxPath(this.id, "links") : boxPath(this.id, "ports", String(port), "links");
    const answer = await this.transport.json<{ links: unknown[] }>({ method: "GET", path, box: this.id });
    return answer.links.map(shareLink);
  }

  /** Ends a share link and every cookie it opened, at once. */
  async revoke(linkId: string): Promise<ShareLink> {
    const answer = await this.transport.json({ method: "DELETE", path: boxPath(this.id, "links", linkId), box: this.id });
    return shareLink(answer);
  }

  private async verb(verb: string, body?: unknown): Promise<this> {
    // A start or resume may take as long as a cold boot (a VM's: up to its boot deadline).
    return this.set({ method: "POST", path: boxPath(this.id, verb), json: body, box: this.id, unbounded: true });
  }

  private async set(call: Call): Promise<this> {
    this.info = await this.transport.json<BoxInfo>(call);
    return this;
  }
}
