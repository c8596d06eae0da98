/**
 * The client of one berth daemon, and the tenant's boxes. Where the daemon is: the
 * options, else (in Node) `BERTH_URL` and `BERTH_API_KEY`, else (in a browser) the page's
 * own origin, signed in by berth's session cookie.
 */

import { Box } from "./box.js";
import { BerthError } from "./errors.js";
import { openFile } from "./local_files.js";
import type { BackupOrigin, BoxInfo, BoxState, CreateBoxOptions, Health, RuntimeInfo } from "./models.js";
import { boxPath } from "./paths.js";
import { Secrets } from "./secrets.js";
import { Templates } from "./templates.js";
import { Tenants } from "./tenants.js";
import { Body, Target, Transport, inNode } from "./transport.js";
import { Web } from "./web.js";
import { Webhooks } from "./webhooks.js";

export const URL_ENV = "BERTH_URL";
export const API_KEY_ENV = "BERTH_API_KEY";

export interface BerthOptions {
  /** The daemon's base URL, e.g. `http://127.0.0.1:7070`. */
  url?: string;
  apiKey?: string;
  /** The bound of each call that is not a stream or a command (default 60 s). */
  timeoutMs?: number;
}

export class Berth {
  readonly boxes: Boxes;
  /** Tenants and their keys (admin; a tenant's key reads itself and its own keys). */
  readonly tenants: Tenants;
  /** The tenant's secrets for the egress gateway. */
  readonly secrets: Secrets;
  readonly templates: Templates;
  /** The tenant's webhooks. */
  readonly webhooks: Webhooks;
  /** Pairing browsers to the web app, and their sessions. */
  readonly web: Web;
  private readonly transport: Transport;

  constructor(options: BerthOptions = {}) {
    const timeoutMs = options.timeoutMs ?? 60_000;
    if (!(timeoutMs > 0)) throw new TypeError(`timeoutMs must be positive, not ${timeoutMs}`);
    this.transport = new Transport(resolve(options), timeoutMs);
    this.boxes = new Boxes(this.transport);
    this.tenants = new Tenants(this.transport);
    this.secrets = new Secrets(this.transport);
    this.templates = new Templates(this.transport);
    this.webhooks = new Webhooks(this.transport);
    this.web = new Web(this.transport);
  }

  get url(): string {
    return this.transport.target.url;
  }

  /** The daemon's status and version (needs no key). */
  async health(): Promise<Health> {
    return this.transport.json<Health>({ method: "GET", path: "/v1/health" });
  }

  /** Every runtime the daemon knows, usable or not (`reason` says why not). */
  async runtimes(): Promise<RuntimeInfo[]> {
    return (await this.transport.json<{ runtimes: RuntimeInfo[] }>({ method: "GET", path: "/v1/runtimes" })).runtimes;
  }
}

function env(name: string): string | undefined {
  return inNode ? process.env[name] || undefined : undefined;
}

/** The target from the options, the environment and the page, in that order. */
export function resolve(options: BerthOptions): Target {
  let url = options.url ?? env(URL_ENV);
  if (!url && typeof location !== "undefined") url = location.origin;
  if (!url) throw new BerthError(`no daemon address: pass {url} or set ${URL_ENV}`);
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") throw new Error("not http(s)");
  } catch {
    throw new BerthError(`the daemon address ${JSON.stringify(url)} is not an http(s) URL`);
  }
  const apiKey = options.apiKey ?? env(API_KEY_ENV);
  // A browser may go without: its session cookie signs it in. Node has no cookie.
  if (!apiKey && inNode) throw new BerthError(`no API key: pass {apiKey} or set ${API_KEY_ENV}`);
  return { url: url.replace(/\/+$/, ""), apiKey };
}

/** Where `boxes.restore` puts the new box; each one absent: the backed-up box's own. */
export interface RestoreOptions {
  /** The new box's name (the backed-up box's is taken while that box exists). */
  name?: string;
  /** Admin only: the tenant (name or `tn_…`) to restore into. Default: the key's. */
  tenant?: string;
  /** The runtime the new box runs on (`sandbox`, `qemu`, …). */
  runtime?: string;
  /** The template the new box is made from. */
  template?: string;
}

/** What a restore made: the new box, and what the backup said of the box it was taken of. */
export interface RestoredBackup {
  /** The new box (a new id, `stopped`; its first start checks its volume in full). */
  box: Box;
  /** The backed-up box: `box_id`, `name`, `tenant`, `created_at` (the backup's time), `berth_version`. */
  from: BackupOrigin;
  /** The bytes of volume data restored. */
  volumeBytes: number;
  /** The memory snapshots restored with it. */
  memorySnapshots: number;
  /** What of the backed-up box could not be kept (a sleep rung the runtime cannot do). */
  notes: string[];
}

/** The tenant's boxes. */
export class Boxes {
  constructor(private readonly transport: Transport) {}

  /**
   * Makes a box (stopped; the next call that needs it starts it). `options` takes the
   * other fields of `POST /v1/boxes` as the API names them (`template`, `runtime`,
   * `limits`, `labels`, `env`, `stop_after_s`, `disk_mib`, `egress`, …).
   */
  async create(name: string, options: CreateBoxOptions = {}): Promise<Box> {
    const info = await this.transport.json<BoxInfo>({
      method: "POST",
      path: "/v1/boxes",
      json: { ...options, name },
    });
    return new Box(this.transport, info);
  }

  /** The boxes with every one of `labels` and in `state`, when given. */
  async list(options: { labels?: Record<string, string>; state?: BoxState } = {}): Promise<Box[]> {
    const params: Array<[string, string]> = Object.entries(options.labels ?? {}).map(([k, v]) => ["label", `${k}=${v}`]);
    if (options.state !== undefined) params.push(["state", options.state]);
    const answer = await this.transport.json<{ boxes: BoxInfo[] }>({ method: "GET", path: "/v1/boxes", params });
    return answer.boxes.map((info) => new Box(this.transport, info));
  }

  /** A box by its id (`bx_…`) or name. */
  async get(ref: string): Promise<Box> {
    return new Box(this.transport, await this.transport.json<BoxInfo>({ method: "GET", path: boxPath(ref) }));
  }

  /** Stops the box and deletes it with its volume. */
  async delete(ref: string): Promise<void> {
    await this.transport.send({ method: "DELETE", path: boxPath(ref), box: ref });
  }

  /**
   * Makes a new box of a backup (`box.backup()`'s bytes, or a scheduled backup's file):
   * `source` is bytes, a `Blob` (a browser's `File`), or an (async) iterable of byte chunks
   * (`box.backup()` itself), streamed. The daemon reads and checks the whole archive before
   * it makes anything: a damaged, cut short or changed one is `InvalidRequest` with the
   * reason, and no box is made; a taken name is `Conflict` (`already_exists`).
   */
  async restore(source: Body, options: RestoreOptions = {}): Promise<RestoredBackup> {
    const params: Array<[string, string]> = [];
    for (const key of ["name", "tenant", "runtime", "template"] as const) {
      const value = options[key];
      if (value !== undefined) params.push([key, value]);
    }
    const answer = await this.transport.json<{
      box: BoxInfo;
      from: BackupOrigin;
      volume_bytes: number;
      memory_snapshots: number;
      notes?: string[];
    }>({
      method: "POST",
      path: "/v1/backups/restore",
      params,
      body: source,
      headers: { "Content-Type": "application/zstd" },
      // Checking a large archive takes as long as reading it.
      unbounded: true,
    });
    return {
      box: new Box(this.transport, answer.box),
      from: answer.from,
      volumeBytes: answer.volume_bytes,
      memorySnapshots: answer.memory_snapshots,
      notes: answer.notes ?? [],
    };
  }

  /** {@link restore} of the local file `path` (`box.backupToFile`'s), streamed. Node only. */
  async restoreFromFile(path: string, options: RestoreOptions = {}): Promise<RestoredBackup> {
    const file = await openFile(path, "restoreFromFile", "restore() with a Blob");
    try {
      return await this.restore(file.chunks, options);
    } finally {
      await file.close();
    }
  }
}
