/**
 * Local directories as tar streams, for `files.uploadDir`/`downloadDir` (Node only): the
 * `tar` package, imported when first needed so a browser bundle never loads it. A file is
 * never held whole either way.
 */

import { BerthError } from "./errors.js";
import { inNode } from "./transport.js";

/** The tar of the two zero blocks that end an archive: an empty directory's. */
const EMPTY_TAR = new Uint8Array(1024);

async function tarModule(what: string): Promise<typeof import("tar")> {
  if (!inNode) throw new BerthError(`${what} needs Node (a local directory); in a browser, use files.write`);
  return import("tar");
}

/**
 * A tar of `directory`'s contents, names relative to it: regular files, directories and
 * symlinks (stored as links); sockets, FIFOs and devices are left out, as the box leaves
 * them out of its own archives.
 */
export async function packDirectory(directory: string): Promise<AsyncIterable<Uint8Array> | Uint8Array> {
  const tar = await tarModule("uploadDir");
  const { readdir, stat } = await import("node:fs/promises");
  const info = await stat(directory).catch((error: NodeJS.ErrnoException) => {
    throw new BerthError(`cannot read the local directory ${directory}: ${error.code ?? error.message}`);
  });
  if (!info.isDirectory()) throw new BerthError(`${directory} is not a directory`);
  const names = (await readdir(directory)).sort();
  if (names.length === 0) return EMPTY_TAR;
  return tar.create(
    {
      cwd: directory,
      portable: true, // no host user names or ids: the box's extraction owns what it writes
      filter: (_path, stats) =>
        !("isFile" in stats) || stats.isFile() || stats.isDirectory() || stats.isSymbolicLink(),
    },
    names,
  ) as unknown as AsyncIterable<Uint8Array>;
}

/**
 * Extracts the tar read from `chunks` into `directory` (made if missing). An entry that
 * would land outside it (an absolute name, `..`, a path through a symlink) is refused with
 * an error (`strict`), like the box's own extraction; files belong to the caller, whatever
 * the archive names as their owner.
 */
export async function unpackInto(chunks: AsyncIterable<Uint8Array>, directory: string): Promise<void> {
  const tar = await tarModule("downloadDir");
  const { mkdir } = await import("node:fs/promises");
  await mkdir(directory, { recursive: true });
  const unpack = tar.extract({ cwd: directory, strict: true, preserveOwner: false });
  const done = new Promise<void>((resolve, reject) => {
    unpack.on("close", () => resolve());
    unpack.on("error", (error: Error) => reject(new BerthError(`cannot extract into ${directory}: ${error.message}`)));
  });
  done.catch(() => {}); // awaited below; an early failure must not be an unhandled rejection
  for await (const chunk of chunks) {
    // Backpressure: wait for the unpacker (the disk) before reading more of the answer.
    // As a Buffer over the same bytes: the unpacker takes a plain Uint8Array view's whole
    // underlying buffer, not just the view.
    if (!unpack.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) {
      await Promise.race([new Promise((resolve) => unpack.once("drain", resolve)), done]);
    }
  }
  unpack.end();
  await done;
}
