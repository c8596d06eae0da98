/**
 * A box's memory: the files below its `/memory`, read without waking it. A running box
 * answers through its agent; a sleeping one (stopped, snapshotted, …) is read from its
 * volume image, and its state and events stay as they were. Reads only: the box itself
 * writes its memory (with `box.files` or `box.exec`, which wake it).
 */

import type { MemoryTree } from "./models.js";
import { boxPath, memoryPath } from "./paths.js";
import type { Transport } from "./transport.js";

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
    return this.transport.json<MemoryTree>({
      method: "GET",
      path: boxPath(this.box, "memory"),
      params: path ? [["path", path]] : [],
      box: this.box,
    });
  }

  /**
   * The bytes of the regular file at `path` below `/memory` (`entities/alice.md`; at most
   * 16 MiB, else `PayloadTooLarge`). A symlink is never followed (`InvalidRequest`,
   * `not_a_regular_file`).
   */
  async read(path: string): Promise<Uint8Array> {
    const answer = await this.transport.send({ method: "GET", path: memoryPath(this.box, path), box: this.box });
    return new Uint8Array(await answer.arrayBuffer());
  }

  /** The file's bytes as UTF-8 text. */
  async readText(path: string): Promise<string> {
    return new TextDecoder().decode(await this.read(path));
  }
}
