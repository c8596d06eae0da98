/**
 * A box's memory: the files below its `/memory`, read without waking it. A running box
 * answers through its agent; a sleeping one (stopped, snapshotted, …) is read from its
 * volume image, and its state and events stay as they were. The box itself writes its
 * memory (with `box.files` or `box.exec`, which wake it).
 *
 * Beyond its files: full-text search and `[[links]]` (a stopped box is searched without
 * waking it), and its history: snapshots (one at each stop whose memory changed, and on
 * request), what one holds, a diff between two, a file as one holds it, and a restore, which
 * writes through the box's agent and so wakes the box.
 */

import type {
  MemoryDiff,
  MemoryGraph,
  MemoryLinks,
  MemoryRestored,
  MemorySearchResults,
  MemorySnapshot,
  MemorySnapshotTree,
  MemoryTree,
} from "./models.js";
import { boxPath, memoryPath } from "./paths.js";
import type { Transport } from "./transport.js";

/** A snapshot, or its id (`ms_…`). */
export type SnapshotRef = string | Pick<MemorySnapshot, "id">;

function snapshotId(snapshot: SnapshotRef): string {
  return typeof snapshot === "string" ? snapshot : snapshot.id;
}

export class Memory {
  constructor(
    private readonly transport: Transport,
    private readonly box: string,
  ) {}

  /**
   * Every entry below the directory `path` of `/memory` (all of it by default), parents
   * before their children; `source` says whether the box or its volume answered.
   */
  async tree(path = ""): Promise<MemoryTree> {
    return this.get<MemoryTree>(["memory"], path ? [["path", path]] : []);
  }

  /**
   * The bytes of the regular file at `path` below `/memory` (`entities/alice.md`; at most
   * 16 MiB, else `PayloadTooLarge`). A symlink is never followed (`InvalidRequest`,
   * `not_a_regular_file`).
   */
  async read(path: string): Promise<Uint8Array> {
    return this.bytes(memoryPath(this.box, path));
  }

  /** The file's bytes as UTF-8 text. */
  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }

  /**
   * The files that match the words of `q` (accents folded), best first, at most `limit`
   * (1–100, 20 by default). A stopped box is searched without waking it. A `q` without
   * words is `InvalidRequest`.
   */
  async search(q: string, options: { limit?: number } = {}): Promise<MemorySearchResults> {
    const params: Array<[string, string]> = [["q", q]];
    if (options.limit !== undefined) params.push(["limit", String(options.limit)]);
    return this.get<MemorySearchResults>(["memory", "search"], params);
  }

  /**
   * The `[[links]]` the file `path` makes (each with the file it resolves to, and whether
   * that exists) and the files linking to it; `NotFound` when the memory holds no such file.
   */
  async links(path: string): Promise<MemoryLinks> {
    return this.get<MemoryLinks>(["memory", "links"], [["path", path]]);
  }

  /** Every file and link target of the memory (`nodes`), and every link between them (`edges`). */
  async graph(): Promise<MemoryGraph> {
    return this.get<MemoryGraph>(["memory", "graph"]);
  }

  /** The memory's snapshots, oldest first. */
  async snapshots(): Promise<MemorySnapshot[]> {
    return (await this.get<{ snapshots: MemorySnapshot[] }>(["memory", "snapshots"])).snapshots;
  }

  /** Takes a snapshot of the memory now, whatever the box's state (which does not change). */
  async snapshot(): Promise<MemorySnapshot> {
    return this.transport.json<MemorySnapshot>({
      method: "POST",
      path: boxPath(this.box, "memory", "snapshots"),
      box: this.box,
    });
  }

  /** The snapshot and every directory and file in it. */
  async snapshotTree(snapshot: SnapshotRef): Promise<MemorySnapshotTree> {
    return this.get<MemorySnapshotTree>(["memory", "snapshots", snapshotId(snapshot)]);
  }

  /**
   * What changed from snapshot `from` to `to` (default: the newest); with `path`, only below
   * it, and a `patch` when that leaves one file of text.
   */
  async diff(from: SnapshotRef, options: { to?: SnapshotRef; path?: string } = {}): Promise<MemoryDiff> {
    const params: Array<[string, string]> = [];
    if (options.to !== undefined) params.push(["to", snapshotId(options.to)]);
    if (options.path !== undefined) params.push(["path", options.path]);
    return this.get<MemoryDiff>(["memory", "snapshots", snapshotId(from), "diff"], params);
  }

  /** The bytes of the file `path` as the snapshot holds it (its path refused as `read` refuses it). */
  async readAt(snapshot: SnapshotRef, path: string): Promise<Uint8Array> {
    const segments = memoryPath(this.box, path).slice(boxPath(this.box, "memory").length);
    return this.bytes(boxPath(this.box, "memory", "snapshots", snapshotId(snapshot), "files") + segments);
  }

  /** The file's bytes in the snapshot, as UTF-8 text. */
  async readTextAt(snapshot: SnapshotRef, path: string): Promise<string> {
    return new TextDecoder().decode(await this.readAt(snapshot, path));
  }

  /**
   * Brings back the whole memory as the snapshot held it (what it did not hold is removed),
   * or only the file or directory `path`. The memory is snapshotted first (`before` in the
   * answer: restore that to undo this). The files are written by the box's agent: a
   * sleeping box is woken.
   */
  async restore(snapshot: SnapshotRef, options: { path?: string } = {}): Promise<MemoryRestored> {
    const body: { snapshot: string; path?: string } = { snapshot: snapshotId(snapshot) };
    if (options.path !== undefined) body.path = options.path;
    return this.transport.json<MemoryRestored>({
      method: "POST",
      path: boxPath(this.box, "memory", "restore"),
      json: body,
      box: this.box,
    });
  }

  private async get<T>(parts: string[], params: Array<[string, string]> = []): Promise<T> {
    return this.transport.json<T>({ method: "GET", path: boxPath(this.box, ...parts), params, box: this.box });
  }

  private async bytes(path: string): Promise<Uint8Array> {
    const answer = await this.transport.send({ method: "GET", path, box: this.box });
    return new Uint8Array(await answer.arrayBuffer());
  }
}
