// A whole box as one file and back: backed up (to a local file or directory, and as a
// stream), restored under new names (from the file, and straight from a backup stream),
// the restored box's files as they were; a flipped byte refused with nothing made; a taken
// name refused even when the daemon knows it before the archive is all sent; a cut download
// leaving no file.

import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from "node:fs/promises";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Berth, Conflict, InvalidRequest, NotFound, Unavailable } from "../dist/index.js";
import { TEST_TIMEOUT_MS, unique, withBoxes } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };
const NOTES = "kept across the backup\n";
/** The four bytes every zstd frame starts with. */
const ZSTD_MAGIC = [0x28, 0xb5, 0x2f, 0xfd];

/** A local temporary directory for `body`, removed after it. */
async function withTempDir(body) {
  const dir = await mkdtemp(join(tmpdir(), "berth-sdk-backup-"));
  try {
    await body(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Runs `body(names)` with box names for restores, and deletes every box of those names
 * after it, whether it passed or not (a restore makes its box outside `withBoxes`).
 */
async function withRestoredNames(berth, count, body) {
  const names = Array.from({ length: count }, () => unique("restored"));
  try {
    await body(names);
  } finally {
    for (const name of names) {
      await berth.boxes.delete(name).catch((error) => {
        if (!(error instanceof NotFound)) throw error;
      });
    }
  }
}

/**
 * The names of the boxes labelled `labels`: a test's own (other files' tests run at the
 * same time), restored ones included, as a backup keeps its box's labels.
 */
async function boxNames(berth, labels) {
  return (await berth.boxes.list({ labels })).map((b) => b.name).sort();
}

test("a box backed up and restored under new names, its files as they were", options, () =>
  withBoxes(async (make, berth) => {
    const labels = { suite: unique("backup") };
    const box = await make("backup", { labels });
    await box.exec(`printf '${NOTES.trim()}\\n' > /home/user/notes.txt`);
    await box.stop();
    await withTempDir((dir) =>
      withRestoredNames(berth, 3, async ([fromFile, fromStream, flippedName]) => {
        const file = join(dir, "box.tar.zst");
        const written = await box.backupToFile(file);
        assert.equal(written.path, file);
        assert.equal((await stat(file)).size, written.bytes);
        assert.deepEqual(await readdir(dir), ["box.tar.zst"], "the temporary file was renamed");
        const archive = await readFile(file);
        assert.deepEqual([...archive.subarray(0, 4)], ZSTD_MAGIC);
        assert.equal((await box.refresh()).state, "stopped", "a backup does not change the box's state");
        // Into a directory: under the daemon's name for it.
        const into = join(dir, "into");
        await mkdir(into);
        const named = await box.backupToFile(into);
        const name = named.path.slice(into.length + 1);
        assert.ok(name.startsWith(`${box.name}-`), name);
        assert.match(name, /-\d{8}T\d{6}Z\.tar\.zst$/);
        assert.deepEqual(await readdir(into), [name]);

        const restored = await berth.boxes.restoreFromFile(file, { name: fromFile });
        assert.equal(restored.box.name, fromFile);
        assert.notEqual(restored.box.id, box.id);
        assert.equal(restored.box.state, "stopped");
        assert.equal(restored.from.box_id, box.id);
        assert.equal(restored.from.name, box.name);
        assert.ok(restored.volumeBytes > 0, String(restored.volumeBytes));
        assert.ok(Number.isInteger(restored.memorySnapshots));
        assert.ok(Array.isArray(restored.notes));
        assert.deepEqual(restored.box.info.labels, labels, "the box's settings come back");
        assert.equal((await restored.box.exec("cat /home/user/notes.txt")).stdout, NOTES);

        // A backup's stream straight into a restore: neither holds the archive whole.
        const piped = await berth.boxes.restore(box.backup(), { name: fromStream });
        assert.equal(piped.box.name, fromStream);
        assert.equal((await piped.box.exec("cat /home/user/notes.txt")).stdout, NOTES);

        // The backed-up box's own name is taken while it lives.
        await assert.rejects(berth.boxes.restore(archive), (e) => e instanceof Conflict && e.code === "already_exists");

        // One byte flipped in the middle: refused with the reason, and no box made.
        const before = await boxNames(berth, labels);
        assert.deepEqual(before, [box.name, fromFile, fromStream].sort());
        const flipped = Uint8Array.from(archive);
        flipped[flipped.length >> 1] ^= 0xff;
        await assert.rejects(
          berth.boxes.restore(flipped, { name: flippedName }),
          (e) => e instanceof InvalidRequest && e.status === 400 && e.code === "invalid_request" && e.message.length > 0,
        );
        assert.deepEqual(await boxNames(berth, labels), before);
        await assert.rejects(berth.boxes.get(flippedName), NotFound);
      }),
    );
  }),
);

test("a refusal the daemon decides on before reading the whole archive reaches the caller", options, () =>
  withBoxes(async (make, berth) => {
    // Big enough that the archive is still being sent when the daemon, having read its
    // header, refuses the taken name: it reads the rest before it answers, so fetch (which
    // sends a body whole before it reads the answer) gets the refusal, not a broken pipe.
    const labels = { suite: unique("backup-big") };
    const box = await make("backup-big", { labels });
    await box.exec("head -c 24000000 /dev/urandom > /home/user/noise.bin");
    await box.stop();
    await withTempDir(async (dir) => {
      const file = join(dir, "big.tar.zst");
      assert.ok((await box.backupToFile(file)).bytes > 20_000_000);
      const before = await boxNames(berth, labels);
      const taken = (e) => e instanceof Conflict && e.code === "already_exists" && e.message.includes(box.name);
      await assert.rejects(berth.boxes.restoreFromFile(file), taken);
      await assert.rejects(berth.boxes.restore(await readFile(file)), taken);
      await assert.rejects(berth.boxes.restore(box.backup()), taken);
      assert.deepEqual(await boxNames(berth, labels), before);
    });
  }),
);

test("a backup of no such box leaves no file", options, () =>
  withBoxes(async (make, berth) => {
    const box = await make("backup-gone");
    await berth.boxes.delete(box.id);
    await withTempDir(async (dir) => {
      await assert.rejects(box.backupToFile(join(dir, "gone.tar.zst")), NotFound);
      assert.deepEqual(await readdir(dir), []);
      await assert.rejects(async () => {
        for await (const _ of box.backup()) assert.fail("a chunk of no box");
      }, NotFound);
    });
  }),
);

test("a download cut part way is an error and leaves no file under the real name", async () => {
  // A fake daemon of one box whose backup stops after some bytes, the connection cut, as
  // the daemon does when a backup fails after its first byte.
  const server = createServer((request, response) => {
    if (request.url === "/v1/boxes/b") {
      response.writeHead(200, { "Content-Type": "application/json" });
      return response.end(JSON.stringify({ id: "b", name: "b", state: "stopped" }));
    }
    assert.equal(request.url, "/v1/boxes/b/backup");
    response.writeHead(200, { "Content-Type": "application/zstd" });
    response.write(new Uint8Array(100_000).fill(7), () => request.socket.destroy());
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  try {
    const berth = new Berth({ url: `http://127.0.0.1:${server.address().port}`, apiKey: "berth_fake" });
    const box = await berth.boxes.get("b");
    await withTempDir(async (dir) => {
      const target = join(dir, "b.tar.zst");
      await writeFile(target, "an older backup\n");
      await assert.rejects(box.backupToFile(target), (e) => e instanceof Unavailable && /cut/.test(e.message));
      assert.deepEqual(await readdir(dir), ["b.tar.zst"], "no temporary file is left");
      assert.equal(await readFile(target, "utf8"), "an older backup\n", "the file there is untouched");
      let got = 0;
      await assert.rejects(async () => {
        for await (const chunk of box.backup()) got += chunk.length;
      }, Unavailable);
      assert.ok(got <= 100_000, String(got));
    });
  } finally {
    server.closeAllConnections?.();
    server.close();
  }
});
