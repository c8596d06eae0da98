/**
 * Local files as byte streams, for `box.backupToFile` and `boxes.restoreFromFile` (Node
 * only): `node:fs/promises`, imported when first needed so a browser bundle never loads it.
 * A file is never held whole either way: a chunk at a time, each write awaited (the disk's
 * backpressure) before the next chunk is read.
 */

import { BerthError } from "./errors.js";
import { inNode } from "./transport.js";

/** The size of each chunk read from a local file. */
const CHUNK_BYTES = 256 * 1024;

type Fs = typeof import("node:fs/promises");

async function fsModule(what: string, instead: string): Promise<Fs> {
  if (!inNode) throw new BerthError(`${what} needs Node (a local file); in a browser, use ${instead}`);
  return import("node:fs/promises");
}

/** What went wrong with a local file, by its code (`ENOENT`) when it has one. */
function reason(error: unknown): string {
  const failure = error as NodeJS.ErrnoException;
  return failure?.code ?? (error instanceof Error ? error.message : String(error));
}

/** A download's answer: its chunks, and the file name it gives, if any (`Content-Disposition`). */
export interface Download {
  chunks: AsyncIterable<Uint8Array>;
  name: string | null;
}

/** A file written whole: where, and its size. */
export interface SavedFile {
  path: string;
  bytes: number;
}

let partials = 0;

/**
 * Writes a download to the local file `dest`, or into the existing directory `dest` under
 * the name the answer gives (else `fallback`). It goes to a temporary file beside its name
 * first (readable by its owner only, as the finished file is), made before `open` sends
 * the call (a directory that cannot take it fails at once), synced and renamed onto the
 * name only once whole: a failure part way (a cut download, a full disk) never leaves a
 * file under the name (an older one there stays as it was), and the temporary file is
 * removed.
 */
export async function saveToFile(
  open: () => Promise<Download>,
  dest: string,
  fallback: string,
  what: string,
  instead: string,
): Promise<SavedFile> {
  const fs = await fsModule(what, instead);
  const { basename, dirname, join } = await import("node:path");
  const isDir = await fs.stat(dest).then(
    (info) => info.isDirectory(),
    () => false,
  );
  const dir = isDir ? dest : dirname(dest);
  const partial = join(dir, `.berth-${process.pid}-${++partials}.part`);
  let file: Awaited<ReturnType<Fs["open"]>>;
  try {
    file = await fs.open(partial, "wx", 0o600);
  } catch (error) {
    throw new BerthError(`cannot write ${dest}: ${reason(error)}`);
  }
  let path = dest;
  let bytes = 0;
  try {
    const download = await open();
    path = isDir ? join(dir, download.name ?? fallback) : join(dir, basename(dest));
    for await (const chunk of download.chunks) {
      for (let done = 0; done < chunk.length; ) done += (await file.write(chunk, done, chunk.length - done)).bytesWritten;
      bytes += chunk.length;
    }
    await file.sync();
    await file.close();
    await fs.rename(partial, path);
  } catch (error) {
    await file.close().catch(() => {});
    await fs.rm(partial, { force: true }).catch(() => {});
    // The call's own errors (an error answer, a cut stream) as they are; the disk's named.
    throw error instanceof BerthError ? error : new BerthError(`cannot write ${path}: ${reason(error)}`);
  }
  // The rename made durable, where the system lets a directory be synced.
  await fs
    .open(dir, "r")
    .then((handle) => handle.sync().finally(() => handle.close()))
    .catch(() => {});
  return { path, bytes };
}

/**
 * The file name a `Content-Disposition` gives, or `null` when it gives none a local file
 * may take as it is (a path, a hidden name, a control character).
 */
export function dispositionName(disposition: string | null): string | null {
  const match = /filename="([^"]*)"/.exec(disposition ?? "") ?? /filename=([^;\s]+)/.exec(disposition ?? "");
  return plainName(match ? match[1] : null);
}

function plainName(name: string | null): string | null {
  if (!name || name.length > 255 || name.startsWith(".") || /[/\\\x00-\x1f\x7f]/.test(name)) return null;
  return name;
}

/** A local file being read: its chunks, and `close` (also when they were not all read). */
export interface LocalFile {
  chunks: AsyncGenerator<Uint8Array>;
  close(): Promise<void>;
}

/**
 * The regular file `path`, opened now (a missing one fails here, before any call), read a
 * chunk at a time as its reader asks.
 */
export async function openFile(path: string, what: string, instead: string): Promise<LocalFile> {
  const fs = await fsModule(what, instead);
  let file: Awaited<ReturnType<Fs["open"]>>;
  try {
    file = await fs.open(path, "r");
  } catch (error) {
    throw new BerthError(`cannot read ${path}: ${reason(error)}`);
  }
  const info = await file.stat().catch(async (error: unknown) => {
    await file.close();
    throw new BerthError(`cannot read ${path}: ${reason(error)}`);
  });
  if (!info.isFile()) {
    await file.close();
    throw new BerthError(`${path} is not a file`);
  }
  let closed: Promise<void> | undefined;
  const close = () => (closed ??= file.close().catch(() => {}));
  async function* chunks(): AsyncGenerator<Uint8Array> {
    try {
      for (;;) {
        // A new buffer each time: the one sent may still be in flight.
        const buffer = new Uint8Array(CHUNK_BYTES);
        const { bytesRead } = await file.read(buffer, 0, CHUNK_BYTES, null).catch((error: unknown) => {
          throw new BerthError(`cannot read ${path}: ${reason(error)}`);
        });
        if (bytesRead === 0) return;
        yield bytesRead === CHUNK_BYTES ? buffer : buffer.subarray(0, bytesRead);
      }
    } finally {
      await close();
    }
  }
  return { chunks: chunks(), close };
}
