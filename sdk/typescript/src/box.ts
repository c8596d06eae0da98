/**
 * One box: its lifecycle verbs, exec, background processes and services, files, its memory
 * (read without waking it), terminals, messages, wakeups and events, ports and share links,
 * its egress audit, and a backup of it all as one file. Each call that answers the box
 * updates `info`.
 */

import { Desktop } from "./desktop.js";
import { ExecCollector, SpawnOptions, StreamedExecOptions, execBody, execResult, spawnBody } from "./exec.js";
import { BerthError, cut } from "./errors.js";
import { Files } from "./files.js";
import { dispositionName, saveToFile } from "./local_files.js";
import { Memory } from "./memory.js";
import { Turn, eventPage, followEvents, turnStart } from "./messages.js";
import {
  BackupFile,
  BoxInfo,
  BoxState,
  EgressPage,
  Event,
  EventPage,
  ExecResult,
  MessageInfo,
  OutputChunk,
  PortUrls,
  ProcessInfo,
  ServiceInfo,
  ShareLink,
  UpdateBoxFields,
} from "./models.js";
import { Command, boxPath } from "./paths.js";
import * as ports from "./ports.js";
import { Process } from "./process.js";
import * as services from "./services.js";
import { readChunks, readFrames } from "./streams.js";
import { Terminal, TerminalOptions } from "./terminal.js";
import type { Call, Transport } from "./transport.js";
import { Wakeups } from "./wakeups.js";

export class Box {
  /** The box's files. */
  readonly files: Files;
  /** The box's `/memory`, read without waking it. */
  readonly memory: Memory;
  /** The box's messages scheduled for later. */
  readonly wakeups: Wakeups;
  /** Computer use, on a box whose template has a desktop. */
  readonly desktop: Desktop;

  constructor(
    private readonly transport: Transport,
    /** The box as last seen (the API's JSON, docs/api.md "Boxes"). */
    public info: BoxInfo,
  ) {
    this.files = new Files(transport, info.id);
    this.memory = new Memory(transport, info.id);
    this.wakeups = new Wakeups(transport, info.id);
    this.desktop = new Desktop(transport, info.id);
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
   * The box's services (the daemons its template declares), in the template's order. Does
   * not wake the box: one that is not running lists its template's, `stopped`.
   */
  async services(): Promise<ServiceInfo[]> {
    return services.services(this.transport, this.id);
  }

  /**
   * The service's log from `offset` (stdout and stderr, across its restarts; the box keeps
   * the last 256 KiB), as it comes: to the log's end, or with `follow` on until the box
   * stops (leave the loop to stop reading). A cut connection is resumed from the last
   * offset read. The box must be running (`Conflict` otherwise).
   */
  serviceLogs(name: string, options: services.ServiceLogOptions = {}): AsyncGenerator<OutputChunk> {
    return services.serviceLogs(this.transport, this.id, name, options);
  }

  /**
   * Restarts the service, waking the box: its running life is stopped and another started
   * at once. Answers the service just after.
   */
  async restartService(name: string): Promise<ServiceInfo> {
    return services.restartService(this.transport, this.id, name);
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
   * answers the same message, and its turn again, even once answered.
   */
  async send(text: string, options: { id?: string } = {}): Promise<Turn> {
    const body: Record<string, string> = { content: text };
    if (options.id !== undefined) body.id = options.id;
    const posted = await this.transport.json<{ id: string; seq: number; events_after?: number | null }>({
      method: "POST",
      path: boxPath(this.id, "messages"),
      json: body,
      box: this.id,
    });
    // The daemon says where the turn starts (the log's end when the message was first
    // stored); an older one does not, and the log is searched for it instead.
    const after = posted.events_after ?? (await turnStart(this.transport, this.id, posted.id));
    return new Turn(this.transport, this.id, posted.id, posted.seq, after);
  }

  /** The messages posted to the box after message seq `after`, oldest first (`limit` ≤ 1000). */
  async messages(options: { after?: number; limit?: number } = {}): Promise<MessageInfo[]> {
    const answer = await this.transport.json<{ messages: MessageInfo[] }>({
      method: "GET",
      path: boxPath(this.id, "messages"),
      params: pageParams(options),
      box: this.id,
    });
    return answer.messages;
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
    return ports.portUrl(this.transport, this.id, port);
  }

  /**
   * One request to the app on `port` at `path` (relative to the port's root, with its
   * query), with the key, waking the box: the app's answer whatever its status.
   */
  async portFetch(port: number, path = "", request: ports.PortRequest = {}): Promise<Response> {
    return ports.portFetch(this.transport, this.id, port, path, request);
  }

  /**
   * A share link to `port` for someone without a key, live for `ttlS` seconds (default an
   * hour); its `url` (with the token) is only in this answer.
   */
  async share(port: number, options: { ttlS?: number } = {}): Promise<ShareLink> {
    return ports.share(this.transport, this.id, port, options.ttlS ?? 3600);
  }

  /** The box's share links (of `port`, when given), without their URLs. */
  async links(port?: number): Promise<ShareLink[]> {
    return ports.links(this.transport, this.id, port);
  }

  /** Ends a share link (of `port`, when given) and every cookie it opened, at once. */
  async revoke(linkId: string, options: { port?: number } = {}): Promise<ShareLink> {
    return ports.revoke(this.transport, this.id, linkId, options.port);
  }

  /**
   * A page of the egress gateway's decisions about the box's outbound connections, oldest
   * first, after record `after` (`limit` 1 to 1000, default 100); pass `next` as `after`
   * for the following page.
   */
  async egressAudit(options: { after?: number; limit?: number } = {}): Promise<EgressPage> {
    return this.transport.json<EgressPage>({
      method: "GET",
      path: boxPath(this.id, "egress"),
      params: pageParams(options),
      box: this.id,
    });
  }

  /**
   * The whole box as one file, its bytes as they come: a zstd-compressed tar of its volume
   * (holes left out), its memory history and its settings, with a sha256 of every part
   * (`client.boxes.restore` makes a new box of it). A running box is held still (frozen or
   * paused) only while its volume is staged; its state does not change. Never held whole.
   * A connection cut part way (the daemon failed after the first byte) throws
   * `Unavailable`, never a quiet end: what came before it is not a backup.
   */
  async *backup(): AsyncGenerator<Uint8Array> {
    const controller = new AbortController();
    try {
      yield* readChunks(await this.transport.stream(this.backupCall(), controller.signal));
    } finally {
      controller.abort();
    }
  }

  /**
   * {@link backup} streamed to the local file `path`, or into the existing directory `path`
   * under the daemon's name for it (`NAME-YYYYMMDDTHHMMSSZ.tar.zst`). It is written to a
   * temporary file beside its name (made before the call: a directory that cannot take it
   * fails at once), synced and renamed onto the name only once whole: a cut or failed
   * backup leaves no file there (and an older one as it was). Answers where it went and
   * its size. Node only.
   */
  async backupToFile(path: string): Promise<BackupFile> {
    const controller = new AbortController();
    try {
      const open = async () => {
        const answer = await this.transport.open(this.backupCall(), controller.signal);
        if (!answer.body) throw new BerthError("the backup answered no body");
        return { chunks: readChunks(answer.body), name: dispositionName(answer.headers.get("Content-Disposition")) };
      };
      return await saveToFile(open, path, `${this.name}.tar.zst`, "backupToFile", "backup()");
    } finally {
      controller.abort();
    }
  }

  private backupCall(): Call {
    return { method: "GET", path: boxPath(this.id, "backup"), box: this.id, unbounded: true };
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

/** The query of a paged list: `after` and `limit` when given. */
function pageParams(options: { after?: number; limit?: number }): Array<[string, string]> {
  const params: Array<[string, string]> = [];
  if (options.after !== undefined) params.push(["after", String(options.after)]);
  if (options.limit !== undefined) params.push(["limit", String(options.limit)]);
  return params;
}
