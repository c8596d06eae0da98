// The E2B npm SDK, unmodified, against berth: a sandbox's `files` (envd's
// filesystem.Filesystem and `/files`, served by berth on its own file operations), and the
// signed upload and download URLs used with Node's own fetch. Run by
// crates/cli/tests/e2b_npm.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY pointing at a
// `berth up`, and BERTH_E2B_JS naming the SDK's module.
// Prints `ok <check>` for each check that passed and `box <sandbox id>`; any failure throws
// (exit status 1).

import { assert, ok, same, show, waitFor } from "./check.mjs";

const { Sandbox, FileType, FilesystemEventType } = await import(process.env.BERTH_E2B_JS);

const sameBytes = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

async function drain(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return new Uint8Array(Buffer.concat(chunks));
}

// 16 KiB holding every byte value: no text decoding could pass it through unharmed.
const RAW = new Uint8Array(256 * 64).map((_, i) => i % 256);
const HOME = "/home/user";

// `secure` is what E2B's docs ask of a sandbox whose URLs are signed; berth signs every
// sandbox's (docs/e2b.md), and the pinned SDK no longer sends the flag.
const sbx = await Sandbox.create({ timeoutMs: 300_000, secure: true });
console.log(`box ${sbx.sandboxId}`);
try {
  const files = sbx.files;
  const info = await files.write("notes/hello.txt", "hello berth\n");
  assert(info.path === `${HOME}/notes/hello.txt` && info.type === FileType.FILE, show(info));
  await files.write(`${HOME}/notes/raw.bin`, RAW.buffer);
  await files.write(`${HOME}/notes/blob.txt`, new Blob(["from ", "a blob"]));
  await files.write(`${HOME}/notes/streamed.txt`, new Blob(["from a stream"]).stream());
  await files.write(`${HOME}/notes/zipped.txt`, "sent gzipped", { gzip: true });
  const written = await files.writeFiles([
    { path: `${HOME}/many/a.txt`, data: "A" },
    { path: `${HOME}/many/b.txt`, data: new TextEncoder().encode("B").buffer },
  ]);
  const paths = written.map((w) => w.path);
  assert(same(paths, [`${HOME}/many/a.txt`, `${HOME}/many/b.txt`]), show(written));
  const alsoWritten = await files.write([{ path: `${HOME}/many/c.txt`, data: "C" }]);
  assert(same(alsoWritten.map((w) => w.path), [`${HOME}/many/c.txt`]), show(alsoWritten));
  ok("js write a string, ArrayBuffer, Blob, stream, gzip and several files");

  assert((await files.read("notes/hello.txt")) === "hello berth\n", "text");
  assert(sameBytes(await files.read("~/notes/raw.bin", { format: "bytes" }), RAW), "bytes");
  const blob = await files.read(`${HOME}/notes/raw.bin`, { format: "blob" });
  assert(sameBytes(new Uint8Array(await blob.arrayBuffer()), RAW), "blob");
  const stream = await files.read(`${HOME}/notes/raw.bin`, { format: "stream" });
  assert(sameBytes(await drain(stream), RAW), "stream");
  assert((await files.read(`${HOME}/notes/hello.txt`, { gzip: true })) === "hello berth\n", "gzip");
  for (const [name, text] of [
    ["blob.txt", "from a blob"],
    ["streamed.txt", "from a stream"],
    ["zipped.txt", "sent gzipped"],
  ]) {
    assert((await files.read(`${HOME}/notes/${name}`)) === text, name);
  }
  const many = await Promise.all(["a", "b", "c"].map((n) => files.read(`${HOME}/many/${n}.txt`)));
  assert(many.join("") === "ABC", show(many));
  ok("js read text, bytes, blob, stream and gzip");

  const top = await files.list(`${HOME}/notes`);
  const names = top.map((e) => e.name).sort();
  const notes = ["blob.txt", "hello.txt", "raw.bin", "streamed.txt", "zipped.txt"];
  assert(same(names, notes), show(names));
  await files.makeDir(`${HOME}/notes/deep/deeper`);
  await files.write(`${HOME}/notes/deep/deeper/x.txt`, "x");
  const one = new Set((await files.list(`${HOME}/notes`, { depth: 1 })).map((e) => e.path));
  assert(one.has(`${HOME}/notes/deep`) && !one.has(`${HOME}/notes/deep/deeper`), show([...one]));
  const three = new Set((await files.list(`${HOME}/notes`, { depth: 3 })).map((e) => e.path));
  assert(three.has(`${HOME}/notes/deep/deeper/x.txt`), show([...three]));
  ok("js list with depth");

  assert(await files.exists(`${HOME}/notes/hello.txt`), "exists");
  assert(!(await files.exists(`${HOME}/notes/nope.txt`)), "does not exist");
  const entry = await files.getInfo(`${HOME}/notes/hello.txt`);
  assert(same([entry.type, entry.size, entry.name], [FileType.FILE, 12, "hello.txt"]), show(entry));
  assert(entry.permissions === "-rw-r--r--" && entry.mode === 0o644, show(entry));
  assert(entry.owner === "user" && entry.group === "user", show(entry));
  // Written a moment ago, by the box's clock (the host's).
  assert(Math.abs(entry.modifiedTime - Date.now()) < 600_000, show(entry));
  const directory = await files.getInfo(`${HOME}/notes/deep`);
  const { type, permissions } = directory;
  assert(type === FileType.DIR && permissions === "drwxr-xr-x", show(directory));
  await files.write("/tmp/mine.txt", "root's", { user: "root" });
  const rootOwned = await files.getInfo("/tmp/mine.txt");
  assert(rootOwned.owner === "root" && rootOwned.group === "root", show(rootOwned));
  ok("js exists and getInfo");

  assert((await files.makeDir(`${HOME}/made/a/b`)) === true, "made");
  assert((await files.makeDir(`${HOME}/made/a/b`)) === false, "there already");
  const moved = await files.rename(`${HOME}/notes/hello.txt`, `${HOME}/moved/hello.txt`);
  assert(moved.path === `${HOME}/moved/hello.txt` && moved.type === FileType.FILE, show(moved));
  assert((await files.read(`${HOME}/moved/hello.txt`)) === "hello berth\n", "moved content");
  assert(!(await files.exists(`${HOME}/notes/hello.txt`)), "the old name is gone");
  await files.remove(`${HOME}/made`);
  assert(!(await files.exists(`${HOME}/made`)), "removed");
  await files.remove(`${HOME}/made`); // gone already: no error, as envd
  ok("js makeDir, rename and remove");

  await files.makeDir(`${HOME}/watched/sub`);
  await files.write(`${HOME}/watched/old.txt`, "old");
  const events = [];
  const watch = await files.watchDir(`${HOME}/watched`, (e) => events.push(e), {
    recursive: true,
    timeoutMs: 0,
  });
  const seen = (name, type) => events.some((e) => e.name === name && e.type === type);
  // Written in place, as envd writes: a create and a write of the name, no other name.
  await files.write(`${HOME}/watched/new.txt`, "new");
  await files.write(`${HOME}/watched/sub/inner.txt`, "inner");
  await files.rename(`${HOME}/watched/old.txt`, `${HOME}/watched/renamed.txt`);
  await files.remove(`${HOME}/watched/renamed.txt`);
  const { CREATE, WRITE, RENAME, REMOVE } = FilesystemEventType;
  const expected = [
    ["new.txt", CREATE],
    ["new.txt", WRITE],
    ["sub/inner.txt", CREATE],
    ["old.txt", RENAME],
    ["renamed.txt", CREATE],
    ["renamed.txt", REMOVE],
  ];
  await waitFor(`the watch's events (${show(events)})`, () =>
    expected.every(([name, type]) => seen(name, type)),
  );
  const watchedNames = new Set(expected.map(([name]) => name).concat(["sub"]));
  assert(events.every((e) => watchedNames.has(e.name)), `only the names written: ${show(events)}`);
  await watch.stop();
  ok("js watchDir");

  const url = await sbx.downloadUrl(`${HOME}/moved/hello.txt`);
  assert(url.includes("signature=v1_"), url);
  // The SDK joins /files to E2B_SANDBOX_URL, which drops its /e2b: berth serves /files at
  // its root for signed URLs.
  assert(new URL(url).pathname === "/files", url);
  let r = await fetch(url);
  assert(r.status === 200 && (await r.text()) === "hello berth\n", r.status);
  const up = await sbx.uploadUrl(`${HOME}/uploaded.txt`);
  const form = new FormData();
  form.append("file", new Blob(["via a url"]), "uploaded.txt");
  r = await fetch(up, { method: "POST", body: form });
  assert(r.status === 200, `${r.status} ${await r.text()}`);
  assert((await files.read(`${HOME}/uploaded.txt`)) === "via a url", "the upload read back");
  const expiring = await sbx.downloadUrl(`${HOME}/moved/hello.txt`, { useSignatureExpiration: 60 });
  assert(new URL(expiring).searchParams.has("signature_expiration"), expiring);
  r = await fetch(expiring);
  assert(r.status === 200 && (await r.text()) === "hello berth\n", r.status);
  const expired = await sbx.downloadUrl(`${HOME}/moved/hello.txt`, { useSignatureExpiration: -10 });
  r = await fetch(expired);
  const refusal = await r.text();
  assert(r.status === 401 && JSON.parse(refusal).code === 401, `${r.status} ${refusal}`);
  const forged = url.replace("hello.txt", "other.txt");
  r = await fetch(forged);
  assert(r.status === 401, `forged: ${r.status} ${await r.text()}`);
  // A multipart body, which fetch streams while it waits for the answer.
  const late = await sbx.uploadUrl(`${HOME}/moved/hello.txt`, { useSignatureExpiration: -10 });
  // A download's signature is for reading: it uploads nothing either.
  for (const [what, refused] of [["an expired upload", late], ["a read signature", url]]) {
    const form = new FormData();
    form.append("file", new Blob([new Uint8Array(1 << 20)]), "hello.txt");
    r = await fetch(refused, { method: "POST", body: form });
    assert(r.status === 401, `${what}: ${r.status} ${await r.text()}`);
  }
  assert((await files.read(`${HOME}/moved/hello.txt`)) === "hello berth\n", "not overwritten");
  ok("js signed urls with fetch, an expired and a forged one refused");
} finally {
  await sbx.kill();
}
ok("done");
