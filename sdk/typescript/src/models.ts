/**
 * What the SDK's calls answer. The API's own JSON (a box, a process) keeps the API's
 * snake_case names and types generated from `openapi.json` (`generated/api_types.ts`,
 * `npm run api-types`); the SDK's own results (an exec's, an output chunk, an event) are
 * camelCase, each keeping the whole answer in `raw` where it came from one: responses may
 * gain fields (docs/api.md, "Conventions"), and an older SDK's caller can still reach them.
 */

import type { components } from "./generated/api_types.js";

type Schemas = components["schemas"];

/** A box as the API shows it (`GET /v1/boxes/{ref}`), snake_case as in docs/api.md. */
export type BoxInfo = Schemas["BoxView"];
/** The body of `POST /v1/boxes` without its `name`. */
export type CreateBoxOptions = Omit<Schemas["CreateBox"], "name">;
/**
 * The box a backup was taken of, as the backup says: `box_id`, `name`, `tenant`,
 * `created_at` (when the backup was taken, RFC 3339) and `berth_version`.
 */
export type BackupOrigin = Schemas["BackupOrigin"];
/** The body of `PATCH /v1/boxes/{ref}`: any subset; `labels` and `env` replace whole. */
export type UpdateBoxFields = Schemas["UpdateBox"];
/** A background process as the box's agent knows it. */
export type ProcessInfo = Schemas["ProcessInfo"];
/**
 * A service of a box (a daemon its template declares, supervised in the box): `state`
 * (`stopped` while the box is not running), `pid`, `restarts` (lives after the first, this
 * boot), `log_end` (the offset just past its log), and for a failed one its `reason`,
 * `last_exit` and `log_tail`. Times are milliseconds since the Unix epoch.
 */
export type ServiceInfo = Schemas["ServiceInfo"];
/** Where a service is in its life: `waiting`, `starting`, `running`, … `failed`, `stopped`. */
export type ServiceState = Schemas["ServiceState"];
/** A state of a box: `stopped`, `running`, `paused`, `failed`, … */
export type BoxState = Schemas["BoxState"];
/**
 * A box's desktop: its X `display`, screen `width` and `height`, whether it is `ready`, and
 * `ready_after_ms` (from its boot's start, or `null`).
 */
export type DesktopStatus = Schemas["DesktopStatus"];
/** One desktop action, by its `type` (`click`, `type`, `key`, …: docs/desktop.md). */
export type DesktopAction = Schemas["DesktopAction"];
/** Where the mouse pointer is, in pixels from the screen's top left corner. */
export type CursorPosition = Schemas["CursorPosition"];

// The rest of the API's own JSON, as the daemon answers it (docs/api.md names each field).
/** A tenant with its `quota` (limits, `null`: none) and `usage`. */
export type TenantInfo = Schemas["TenantView"];
/** A tenant's limits: each field given sets one (`null` clears it), absent ones stay. */
export type Quota = Schemas["QuotaBody"];
/** An API key of a tenant, without the key itself (`prefix` is its first characters). */
export type KeyInfo = Schemas["KeyView"];
/** A secret's name and dates: no answer ever carries a value. */
export type SecretInfo = Schemas["SecretView"];
export type TemplateInfo = Schemas["TemplateView"];
/** A template file that did not load, and why. */
export type TemplateError = Schemas["TemplateErrorView"];
/** A runtime the daemon knows, usable (`available`) or not (`reason`). */
export type RuntimeInfo = Schemas["RuntimeView"];
export type Health = Schemas["Health"];
/** A scheduled message of a box: `kind` `at`, `in` or `cron`; `next_due_at` its next slot. */
export type WakeupInfo = Schemas["WakeupView"];
/** A message posted to a box: `state` `queued` or `delivered`. */
export type MessageInfo = Schemas["MessageView"];
/** A page of a box's egress decisions, oldest first; `next` is the next page's `after`. */
export type EgressPage = Schemas["AuditPage"];
export type WebhookInfo = Schemas["WebhookView"];
/** One event's delivery to a webhook: `state` `pending`, `delivered` or `failed`. */
export type Delivery = Schemas["DeliveryView"];
/** A one-time code that signs a browser in (`url` opens the web app with it). */
export type Pairing = Schemas["PairingView"];
/** A signed-in browser of the tenant. */
export type WebSession = Schemas["WebSessionView"];
/**
 * A box's `/memory` listed (`GET …/memory`): `source` `box` (its agent answered) or
 * `volume` (read from a sleeping box's image); `entries` parents before their children;
 * `truncated` when the tree was too big for one answer (what is here is its start).
 */
export type MemoryTree = Schemas["MemoryTree"];
/**
 * One entry of a box's memory: `path` below `/memory` (`entities/alice.md`), `kind`, `size`,
 * `modified` (seconds since the Unix epoch; absent when read from a volume), `target` (a
 * symlink's, never followed).
 */
export type MemoryEntry = Schemas["MemoryEntry"];
/** Where a memory answer was read from: `box` or `volume`. */
export type MemorySource = Schemas["MemorySource"];
/**
 * A search of a box's memory (`GET …/memory/search`): `hits` best first, and
 * `indexed_files`, the files the box's index holds.
 */
export type MemorySearchResults = Schemas["MemorySearchResults"];
/**
 * One file that matched: `path`, `score` (BM25, comparable within one answer only), a
 * plain-text `snippet` around its best match, and `highlights`, the `[start, end)` ranges
 * of the snippet's UTF-8 bytes (not of its JavaScript string) that matched.
 */
export type MemoryHit = Schemas["MemoryHit"];
/** A file's `outgoing` `[[links]]` (each `{text, target, exists}`) and its `backlinks`. */
export type MemoryLinks = Schemas["MemoryLinks"];
export type MemoryLink = Schemas["MemoryLink"];
/** Every file and link target of a memory (`nodes`, `{path, exists}`) and its links (`edges`, `{from, to}`). */
export type MemoryGraph = Schemas["MemoryGraph"];
/**
 * One snapshot of a box's `/memory`: `id` (`ms_` and its time in milliseconds: ids sort as
 * times), `taken_at`, `reason` (`stop`, `request` or `before_restore`), `files`, `bytes`,
 * `stored_bytes` (what it added to the store) and `root` (equal roots, equal trees).
 */
export type MemorySnapshot = Schemas["MemorySnapshot"];
/** A snapshot and every entry in it (`{path, kind, size}`, `kind` `file` or `dir`). */
export type MemorySnapshotTree = Schemas["MemorySnapshotTree"];
/** What changed from snapshot `from` to `to`, by path. */
export type MemoryDiff = Schemas["MemoryDiff"];
/**
 * One changed file: `change` `added`, `removed` or `modified`, its sizes, and `patch` (a
 * unified diff) when the diff was asked for one path and both sides are text of ≤ 1 MiB.
 */
export type MemoryChange = Schemas["MemoryChange"];
/** What a restore did: `restored`, the snapshot taken just `before` (restore it to undo), `files` written back, `removed`. */
export type MemoryRestored = Schemas["MemoryRestored"];

/** A finished command: its code (128 + signal after a signal) and its output. */
export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  /** It ran past its timeout and was killed. */
  timedOut: boolean;
  /** Its output was cut at 16 MiB. */
  truncated: boolean;
}

/** How a background process ended. */
export interface ProcessExit {
  /** `null` after a signal. */
  code: number | null;
  signal: number | null;
  timedOut: boolean;
  /** The offset just past its last output byte. */
  outputEnd: number | null;
  /** The shell's status: the code, or 128 + the signal. */
  status: number;
}

export function processExit(frame: any): ProcessExit {
  const code = frame.code ?? null;
  const signal = frame.signal ?? null;
  return {
    code,
    signal,
    timedOut: Boolean(frame.timed_out),
    outputEnd: frame.output_end ?? null,
    status: code ?? 128 + (signal ?? 0),
  };
}

/**
 * A piece of a background process's output or of a service's log: which `stream`, its
 * `offset` (stdout and stderr counted together, in the order they came) and its bytes.
 */
export class OutputChunk {
  constructor(
    readonly stream: "stdout" | "stderr",
    readonly offset: number,
    readonly data: Uint8Array,
  ) {}

  /** The bytes as UTF-8 (a character split between chunks shows as U+FFFD). */
  get text(): string {
    return new TextDecoder().decode(this.data);
  }

  /** The offset just past this chunk: where a reader resumes. */
  get end(): number {
    return this.offset + this.data.length;
  }
}

/** A file in a box: `mode` the permission bits, `mtime` seconds since the Unix epoch. */
export interface FileEntry {
  name: string;
  kind: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime: number;
  owner: string | null;
  group: string | null;
  symlinkTarget: string | null;
}

export function fileEntry(data: any): FileEntry {
  return {
    name: data.name,
    kind: data.kind,
    size: data.size,
    mode: data.mode,
    mtime: data.mtime,
    owner: data.owner ?? null,
    group: data.group ?? null,
    symlinkTarget: data.symlink_target ?? null,
  };
}

/**
 * One change a watch saw: `create`, `modify`, `delete`, `rename` (with `from` and `to`),
 * `overflow` (events were dropped: rescan) or `gone` (the watched path itself went; the
 * watch ends). Paths are relative to the watched directory.
 */
export interface WatchEvent {
  type: "create" | "modify" | "delete" | "rename" | "overflow" | "gone" | string;
  path: string | null;
  dir: boolean;
  from: string | null;
  to: string | null;
}

export function watchEvent(data: any): WatchEvent {
  return {
    type: data.type,
    path: data.path ?? null,
    dir: Boolean(data.dir),
    from: data.from ?? null,
    to: data.to ?? null,
  };
}

/** A backup written whole to a local file (`box.backupToFile`): its `path` and its size in `bytes`. */
export interface BackupFile {
  path: string;
  bytes: number;
}

/** What an upload of a directory wrote: files, directories, links and bytes. */
export interface ArchiveWritten {
  files: number;
  dirs: number;
  links: number;
  bytes: number;
}

export function archiveWritten(data: any): ArchiveWritten {
  return { files: data.files ?? 0, dirs: data.dirs ?? 0, links: data.links ?? 0, bytes: data.bytes ?? 0 };
}

/**
 * One event of a box's log: `seq` (per box, from 1, no gaps), `type` (the harness's own:
 * `system`, `assistant`, `user`, `result`, …, or berth's: `state`, `log`, `gap`, …) and
 * its `data`; `messageId` is the message a `user` replay or a `result` belongs to.
 */
export interface Event {
  seq: number;
  type: string;
  data: Record<string, any>;
  createdAt: string;
  messageId: string | null;
}

export function event(raw: any): Event {
  const data = raw.data && typeof raw.data === "object" ? raw.data : {};
  return {
    seq: raw.seq,
    type: raw.type,
    data,
    createdAt: raw.created_at ?? "",
    messageId: typeof data.message_id === "string" ? data.message_id : null,
  };
}

/**
 * A page of events: `nextAfter` is where the next page starts, `more` whether more are
 * stored already; `gap` names events pruned before they were read.
 */
export interface EventPage {
  events: Event[];
  nextAfter: number;
  more: boolean;
  gap: { first: number; last: number } | null;
}

/** Where a box's port is reached: `url` needs the key (or a share link's cookie). */
export interface PortUrls {
  port: number;
  url: string;
  /** `null` unless the daemon has a `[ports] base_domain`. */
  hostUrl: string | null;
}

/**
 * A share link to a box's port: `url` carries its token and is only in the answer that
 * made it; `state` is `live`, `expired` or `revoked`.
 */
export interface ShareLink {
  id: string;
  boxId: string;
  port: number;
  state: "live" | "expired" | "revoked";
  createdAt: string;
  expiresAt: string;
  revokedAt: string | null;
  url: string | null;
  hostUrl: string | null;
}

export function shareLink(data: any): ShareLink {
  return {
    id: data.id,
    boxId: data.box_id,
    port: data.port,
    state: data.state,
    createdAt: data.created_at,
    expiresAt: data.expires_at,
    revokedAt: data.revoked_at ?? null,
    url: data.url ?? null,
    hostUrl: data.host_url ?? null,
  };
}
