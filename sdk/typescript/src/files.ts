/**
 * A box's files: bytes and text both ways, streamed; listings; whole directories as tar
 * streams; watches (docs/api.md, "Files"). Every call takes `user` (`user` by default, or
 * `root`) and wakes a stopped box.
 */

import { NotFound } from "./errors.js";
import { packDirectory, unpackInto } from "./local_dirs.js";
import {
  ArchiveWritten,
  FileEntry,
  WatchEvent,
  archiveWritten,
  fileEntry,
  watchEvent,
} from "./models.js";
import { BoxUser, boxPath, fileParams } from "./paths.js";
import { readChunks, readFrames } from "./streams.js";
import type { Body, Call, Transport } from "./transport.js";

export interface UserOption {
  user?: BoxUser;
}

export interface RecursiveOption extends UserOption {
  recursive?: boolean;
}

export class Files {
  constructor(
    private readonly transport: Transport,
    private readonly box: string,
  ) {}

  /** The file's bytes. */
  async read(path: string, options: UserOption = {}): Promise<Uint8Array> {
    const answer = await this.transport.send(this.call("GET", "", path, options, [], true));
    return new Uint8Array(await answer.arrayBuffer());
  }

  async readText(path: string, options: UserOption = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /** The file's bytes as they come (for a file too big to hold). */
  async *readStream(path: string, options: UserOption = {}): AsyncGenerator<Uint8Array> {
    const controller = new AbortController();
    try {
      const body = await this.transport.stream(this.call("GET", "", path, options, [], true), controller.signal);
      yield* readChunks(body);
    } finally {
      controller.abort();
    }
  }

  /**
   * Writes `data` (text as UTF-8, bytes, a `Blob`, or chunks, streamed) to `path`,
   * atomically; `mode` is its permission bits (e.g. `0o755`).
   */
  async write(path: string, data: Body, options: UserOption & { mode?: number } = {}): Promise<void> {
    const extra: Array<[string, string]> = options.mode !== undefined ? [["mode", String(options.mode)]] : [];
    const call = this.call("PUT", "", path, options, extra, true);
    await this.transport.send({ ...call, body: data, headers: { "Content-Type": "application/octet-stream" } });
  }

  async list(path: string, options: UserOption = {}): Promise<FileEntry[]> {
    const answer = await this.transport.json<{ entries: unknown[] }>(this.call("GET", "list", path, options));
    return answer.entries.map(fileEntry);
  }

  async stat(path: string, options: UserOption = {}): Promise<FileEntry> {
    return fileEntry(await this.transport.json(this.call("GET", "stat", path, options)));
  }

  async exists(path: string, options: UserOption = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (error) {
      if (error instanceof NotFound) return false;
      throw error;
    }
  }

  /** Makes a directory (with its parents when `recursive`). */
  async mkdir(path: string, options: RecursiveOption = {}): Promise<void> {
    await this.transport.send(this.call("POST", "mkdir", path, options, recursive(options)));
  }

  /** Removes a file, or a directory (a non-empty one only when `recursive`). */
  async remove(path: string, options: RecursiveOption = {}): Promise<void> {
    await this.transport.send(this.call("DELETE", "", path, options, recursive(options)));
  }

  /**
   * Copies the contents of the local directory `local` into the box's directory `path`
   * (made if missing), streamed as a tar. Node only.
   */
  async uploadDir(local: string, path: string, options: UserOption = {}): Promise<ArchiveWritten> {
    const tar = await packDirectory(local);
    const call = this.call("PUT", "archive", path, options, [], true);
    const answer = await this.transport.json({ ...call, body: tar, headers: { "Content-Type": "application/x-tar" } });
    return archiveWritten(answer);
  }

  /**
   * Copies the contents of the box's directory `path` into the local directory `local`
   * (made if missing), streamed as a tar; nothing is written outside it. Node only.
   */
  async downloadDir(path: string, local: string, options: UserOption = {}): Promise<void> {
    const controller = new AbortController();
    try {
      const body = await this.transport.stream(this.call("GET", "archive", path, options, [], true), controller.signal);
      await unpackInto(readChunks(body), local);
    } finally {
      controller.abort();
    }
  }

  /**
   * The changes under directory `path` as they happen, until the loop leaves or the path
   * itself goes (a `gone` event, the last). A box going to sleep ends it.
   */
  async *watch(path: string, options: RecursiveOption = {}): AsyncGenerator<WatchEvent> {
    const controller = new AbortController();
    try {
      const call = this.call("GET", "watch", path, options, recursive(options), true);
      for await (const frame of readFrames(await this.transport.stream(call, controller.signal))) {
        const event = watchEvent(frame);
        yield event;
        if (event.type === "gone") return;
      }
    } finally {
      controller.abort();
    }
  }

  private call(
    method: string,
    verb: string,
    path: string,
    options: UserOption,
    extra: Array<[string, string]> = [],
    unbounded = false,
  ): Call {
    const route = verb ? boxPath(this.box, "files", verb) : boxPath(this.box, "files");
    return { method, path: route, params: fileParams(path, options.user, ...extra), box: this.box, unbounded };
  }
}

function recursive(options: RecursiveOption): Array<[string, string]> {
  return options.recursive ? [["recursive", "true"]] : [];
}
