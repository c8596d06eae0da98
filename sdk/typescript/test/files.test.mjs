// Files both ways: bytes, text and streams; listings; whole directories; a watch.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, readlink, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { Conflict, InvalidRequest, NotFound, PermissionDenied } from "../dist/index.js";
import { TEST_TIMEOUT_MS, waitUntil, within, withBox } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

/** A local temporary directory for `body`, removed after it. */
async function withTempDir(body) {
  const dir = await mkdtemp(join(tmpdir(), "berth-sdk-"));
  try {
    await body(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function fill(byte, length) {
  return new Uint8Array(length).fill(byte);
}

test("bytes, text and streams both ways", options, () =>
  withBox(async (box) => {
    const files = box.files;
    await files.write("/tmp/hello.txt", "héllo\n");
    assert.equal(await files.readText("/tmp/hello.txt"), "héllo\n");
    const blob = new Uint8Array(256 * 1024).map((_, i) => i % 256);
    await files.write("/tmp/blob", blob, { mode: 0o600 });
    assert.deepEqual(await files.read("/tmp/blob"), blob);
    assert.equal((await files.stat("/tmp/blob")).mode & 0o777, 0o600);

    async function* chunks() {
      for (let i = 0; i < 5; i++) yield fill(i, 70000);
    }
    await files.write("/tmp/streamed", chunks());
    const parts = [];
    for await (const part of files.readStream("/tmp/streamed")) parts.push(part);
    const streamed = Buffer.concat(parts);
    assert.equal(streamed.length, 350000);
    for (let i = 0; i < 5; i++) assert.ok(streamed.subarray(i * 70000, (i + 1) * 70000).every((b) => b === i));
    assert.equal((await box.exec("wc -c < /tmp/streamed")).stdout.trim(), "350000");
    await files.write("/tmp/from-a-blob", new Blob(["a ", "blob"]));
    assert.equal(await files.readText("/tmp/from-a-blob"), "a blob");
    // What is not data is refused before the call, saying what data is.
    await assert.rejects(files.write("/tmp/bad", 42), /data to send is a string, bytes/);
    await assert.rejects(files.write("/tmp/bad", [new Uint8Array(1), {}]), /^TypeError: a chunk of data to send is bytes/);
    // The caller's own failure while its chunks stream is thrown as it is.
    async function* failing() {
      yield new Uint8Array(1);
      throw new RangeError("the local source failed");
    }
    await assert.rejects(files.write("/tmp/bad", failing()), RangeError);
    assert.ok(!(await files.exists("/tmp/bad")));
  }),
);

test("listing, stat, mkdir and remove", options, () =>
  withBox(async (box) => {
    const files = box.files;
    await files.mkdir("/tmp/tree/a/b", { recursive: true });
    await files.write("/tmp/tree/a/file", new TextEncoder().encode("12345"));
    const entries = Object.fromEntries((await files.list("/tmp/tree/a")).map((e) => [e.name, e]));
    assert.equal(entries.b.kind, "dir");
    assert.equal(entries.file.kind, "file");
    assert.equal(entries.file.size, 5);
    assert.equal((await files.stat("/tmp/tree/a/file")).kind, "file");
    assert.ok(await files.exists("/tmp/tree/a"));
    assert.ok(!(await files.exists("/tmp/tree/nothing")));
    await assert.rejects(files.remove("/tmp/tree"), (error) => error instanceof Conflict && error.code === "not_empty");
    await files.remove("/tmp/tree", { recursive: true });
    assert.ok(!(await files.exists("/tmp/tree")));
  }),
);

test("file errors map", options, () =>
  withBox(async (box) => {
    const files = box.files;
    await assert.rejects(files.read("/tmp/no-such-file"), NotFound);
    await assert.rejects(files.read("/tmp"), (error) => error instanceof InvalidRequest && error.code === "is_a_directory");
    await assert.rejects(files.read("relative/path"), InvalidRequest);
    await files.write("/tmp/roots", "secret", { mode: 0o600, user: "root" });
    await assert.rejects(files.read("/tmp/roots"), PermissionDenied);
    assert.equal(await files.readText("/tmp/roots", { user: "root" }), "secret");
  }),
);

test("a directory goes up and comes back", options, () =>
  withBox((box) =>
    withTempDir(async (local) => {
      const source = join(local, "source");
      await mkdir(join(source, "sub/deeper"), { recursive: true });
      await writeFile(join(source, "top.txt"), "top\n");
      const data = randomBytes(200_000);
      await writeFile(join(source, "sub/deeper/data.bin"), data);
      await writeFile(join(source, "run.sh"), "#!/bin/sh\necho ran\n");
      await chmod(join(source, "run.sh"), 0o755);
      await symlink("top.txt", join(source, "link"));

      const written = await box.files.uploadDir(source, "/tmp/up/there");
      assert.deepEqual([written.files, written.dirs, written.links], [3, 2, 1]);
      assert.equal((await box.exec("/tmp/up/there/run.sh")).stdout, "ran\n");
      assert.equal((await box.exec("cat /tmp/up/there/link")).stdout, "top\n");

      await box.exec("echo made in the box > /tmp/up/there/sub/new.txt");
      const back = join(local, "back");
      await box.files.downloadDir("/tmp/up/there", back);
      assert.equal(await readFile(join(back, "top.txt"), "utf-8"), "top\n");
      assert.deepEqual(await readFile(join(back, "sub/deeper/data.bin")), data);
      assert.equal(await readFile(join(back, "sub/new.txt"), "utf-8"), "made in the box\n");
      assert.equal(await readlink(join(back, "link")), "top.txt");
      assert.equal((await stat(join(back, "run.sh"))).mode & 0o777, 0o755);

      // An empty directory, and a local path that is not a directory.
      await mkdir(join(local, "empty"));
      assert.equal((await box.files.uploadDir(join(local, "empty"), "/tmp/empty")).files, 0);
      assert.equal((await box.files.stat("/tmp/empty")).kind, "dir");
      await assert.rejects(box.files.uploadDir(join(source, "top.txt"), "/tmp/x"), /is not a directory/);
    }),
  ),
);

test("a watch sees changes until its directory goes", options, () =>
  withBox(async (box) => {
    await box.files.mkdir("/tmp/watched");
    const seen = [];
    const watching = (async () => {
      for await (const event of box.files.watch("/tmp/watched", { recursive: true })) seen.push(event);
    })();
    // The watch is on once a change shows: probe until one does.
    let probes = 0;
    await waitUntil(async () => {
      await box.files.write(`/tmp/watched/probe-${probes++}`, "");
      return seen.some((e) => e.type === "create");
    }, "a probe's create event");
    seen.length = 0;
    await box.exec("mkdir /tmp/watched/d && echo x > /tmp/watched/d/f && mv /tmp/watched/d/f /tmp/watched/d/g");
    await box.exec("rm -rf /tmp/watched");
    await within(watching, "the watch ends when its directory goes");
    const kinds = seen.map((e) => [e.type, e.path ?? e.to]);
    const show = JSON.stringify(kinds);
    assert.ok(seen.some((e) => e.type === "create" && e.path === "d"), show);
    assert.ok(seen.some((e) => e.type === "create" && e.path === "d/f"), show);
    assert.ok(seen.some((e) => e.type === "rename" && e.from === "d/f" && e.to === "d/g"), show);
    assert.equal(seen.at(-1).type, "gone", show);
  }),
);

test("a watch left early frees its stream", options, () =>
  withBox(async (box) => {
    await box.files.mkdir("/tmp/w");
    // More watches than a tenant's 128 streams: each one left must have been closed.
    for (let round = 0; round < 130; round++) {
      const events = box.files.watch("/tmp/w");
      const first = events.next();
      await waitUntil(async () => {
        await box.files.write("/tmp/w/probe", String(round));
        return Promise.race([first.then(() => true), new Promise((r) => setTimeout(() => r(false), 50))]);
      }, `round ${round}'s watch sees a change`);
      await events.return();
    }
  }),
);
