// A box's memory (/memory), read without waking it: through its agent while it runs, from
// its volume image once it is stopped (and it stays stopped).

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidRequest, NotFound, PayloadTooLarge } from "../dist/index.js";
import { TEST_TIMEOUT_MS, withBox } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

const WRITE_MEMORY = [
  "mkdir -p /memory/entities /memory/timeline/2026",
  "printf 'Alice likes tea.\\n' > /memory/entities/alice.md",
  "printf 'day one\\n' > '/memory/timeline/2026/12 04 #1.md'",
  "ln -s /home/user/.bashrc /memory/escape",
  "head -c 17000000 /dev/zero > /memory/big.bin",
].join(" && ");

const WRITTEN = ["big.bin", "entities", "entities/alice.md", "escape", "timeline", "timeline/2026", "timeline/2026/12 04 #1.md"];

function paths(tree) {
  return tree.entries.map((entry) => entry.path);
}

function entry(tree, path) {
  const found = tree.entries.find((e) => e.path === path);
  assert.ok(found, `${path} not in ${JSON.stringify(paths(tree))}`);
  return found;
}

/** The reads both ways of answering give alike, and their refusals. */
async function readsAlike(memory, source) {
  const tree = await memory.tree();
  assert.equal(tree.source, source);
  for (const path of WRITTEN) assert.ok(paths(tree).includes(path), `${path} not in ${JSON.stringify(paths(tree))}`);
  assert.equal(entry(tree, "entities").kind, "dir");
  const alice = entry(tree, "entities/alice.md");
  assert.equal(alice.kind, "file");
  assert.equal(alice.size, 17);
  assert.equal(entry(tree, "escape").kind, "symlink");
  assert.equal(tree.truncated ?? false, false);

  const sub = await memory.tree("timeline");
  assert.equal(sub.source, source);
  // The seeded folder's README.md (from the template's memory layout) is listed too.
  assert.deepEqual(paths(sub), ["timeline/2026", "timeline/2026/12 04 #1.md", "timeline/README.md"]);
  // A leading /memory/ is the same path.
  assert.deepEqual(paths(await memory.tree("/memory/timeline")), paths(sub));

  assert.equal(await memory.readText("entities/alice.md"), "Alice likes tea.\n");
  assert.deepEqual(await memory.read("/memory/entities/alice.md"), new TextEncoder().encode("Alice likes tea.\n"));
  // Each segment is escaped, its `/`s kept.
  assert.equal(await memory.readText("timeline/2026/12 04 #1.md"), "day one\n");

  await assert.rejects(memory.readText("entities/bob.md"), NotFound);
  await assert.rejects(memory.tree("nowhere"), NotFound);
  const refused = (code) => (error) => error instanceof InvalidRequest && error.code === code;
  await assert.rejects(memory.read("escape"), refused("not_a_regular_file"));
  await assert.rejects(memory.read("entities"), refused("is_a_directory"));
  await assert.rejects(memory.read(""), refused("is_a_directory"));
  await assert.rejects(memory.tree("entities/alice.md"), refused("not_a_directory"));
  // Past 16 MiB a file is refused whole, not cut.
  await assert.rejects(memory.read("big.bin"), (error) => error instanceof PayloadTooLarge && error.status === 413);
  await assert.rejects(memory.tree("../home"), refused("invalid_request"));
  await assert.rejects(memory.read("../home/user/.bashrc"), refused("invalid_request"));
  return tree;
}

test("a running box's memory comes from the box, a stopped one's from its volume", options, () =>
  withBox(async (box, berth) => {
    const written = await box.exec(WRITE_MEMORY);
    assert.equal(written.exitCode, 0, written.stderr);

    const awake = await readsAlike(box.memory, "box");
    assert.ok(entry(awake, "entities/alice.md").modified > 1_700_000_000);
    assert.equal((await box.refresh()).state, "running");

    assert.equal((await box.stop()).state, "stopped");
    const asleep = await readsAlike(box.memory, "volume");
    assert.deepEqual(paths(asleep), paths(awake));
    assert.equal(entry(asleep, "escape").target, "/home/user/.bashrc");
    assert.equal(entry(asleep, "entities/alice.md").modified ?? null, null);

    // A fresh handle reads it the same; the box was never woken.
    const again = await berth.boxes.get(box.name);
    assert.equal(await again.memory.readText("entities/alice.md"), "Alice likes tea.\n");
    assert.equal((await berth.boxes.get(box.id)).state, "stopped");
    assert.equal((await box.refresh()).state, "stopped");
  }),
);
