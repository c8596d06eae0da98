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

const WRITE_LINKED = [
  "mkdir -p /memory/entities",
  "printf 'Alice likes [[bob]] and zanzibar.\\n' > /memory/entities/alice.md",
  "printf 'Bob\\n' > /memory/entities/bob.md",
].join(" && ");
const LINKED_ALICE = "Alice likes [[bob]] and zanzibar.\n";
const REWRITE = [
  "printf 'Alice moved to Oslo.\\n' > /memory/entities/alice.md",
  "printf 'Carol\\n' > /memory/entities/carol.md",
].join(" && ");

const hitPaths = (results) => results.hits.map((hit) => hit.path);

test("a stopped box's memory is searched and its links followed, without waking it", options, () =>
  withBox(async (box) => {
    const written = await box.exec(WRITE_LINKED);
    assert.equal(written.exitCode, 0, written.stderr);
    await box.stop();

    const found = await box.memory.search("zanzibar");
    assert.equal(found.query, "zanzibar");
    assert.ok(found.indexed_files >= 2, JSON.stringify(found));
    assert.deepEqual(hitPaths(found), ["entities/alice.md"]);
    const [hit] = found.hits;
    assert.ok(hit.score > 0);
    // Highlights are byte ranges of the snippet's UTF-8.
    const snippet = new TextEncoder().encode(hit.snippet);
    assert.deepEqual(
      hit.highlights.map(([start, end]) => new TextDecoder().decode(snippet.slice(start, end))),
      ["zanzibar"],
    );
    assert.equal((await box.memory.search("bob alice", { limit: 1 })).hits.length, 1);
    await assert.rejects(box.memory.search("  "), (error) => error instanceof InvalidRequest && error.status === 400);

    const alice = await box.memory.links("entities/alice.md");
    assert.deepEqual(alice, {
      path: "entities/alice.md",
      outgoing: [{ text: "bob", target: "entities/bob.md", exists: true }],
      backlinks: [],
    });
    const bob = await box.memory.links("/memory/entities/bob.md");
    assert.ok(bob.backlinks.includes("entities/alice.md"), JSON.stringify(bob));
    await assert.rejects(box.memory.links("entities/nobody.md"), NotFound);

    const graph = await box.memory.graph();
    assert.ok(graph.edges.some((e) => e.from === "entities/alice.md" && e.to === "entities/bob.md"), JSON.stringify(graph));
    assert.ok(graph.nodes.some((n) => n.path === "entities/bob.md" && n.exists));
    assert.equal((await box.refresh()).state, "stopped");
  }),
);

test("a box's memory is snapshotted, diffed, read as it was, and restored", options, () =>
  withBox(async (box) => {
    assert.equal((await box.exec(WRITE_LINKED)).exitCode, 0);
    const first = await box.memory.snapshot();
    assert.match(first.id, /^ms_\d{15}$/);
    assert.equal(first.reason, "request");
    assert.ok(first.files >= 2 && first.bytes > LINKED_ALICE.length, JSON.stringify(first));
    await box.stop();

    // The history is read from the store: the box stays stopped.
    const listed = await box.memory.snapshots();
    assert.deepEqual(listed[0], first);
    const tree = await box.memory.snapshotTree(first);
    assert.deepEqual(tree.snapshot, first);
    assert.deepEqual(tree.entries.find((e) => e.path === "entities/alice.md"), {
      path: "entities/alice.md",
      kind: "file",
      size: LINKED_ALICE.length,
    });
    assert.equal(tree.entries.find((e) => e.path === "entities").kind, "dir");
    assert.equal(await box.memory.readTextAt(first, "entities/alice.md"), LINKED_ALICE);
    assert.deepEqual(await box.memory.readAt(first.id, "/memory/entities/bob.md"), new TextEncoder().encode("Bob\n"));
    await assert.rejects(box.memory.readAt(first, "entities/carol.md"), NotFound);
    await assert.rejects(box.memory.snapshotTree("ms_000000000000001"), NotFound);
    assert.equal((await box.refresh()).state, "stopped");

    assert.equal((await box.exec(REWRITE)).exitCode, 0); // wakes the box
    const second = await box.memory.snapshot();
    assert.ok(second.id > first.id && second.root !== first.root);
    const whole = await box.memory.diff(first);
    assert.deepEqual([whole.from, whole.to], [first.id, second.id]);
    assert.deepEqual(
      whole.changes.map((c) => [c.path, c.change]).sort(),
      [["entities/alice.md", "modified"], ["entities/carol.md", "added"]],
    );
    assert.ok(whole.changes.every((c) => c.patch == null));
    const one = await box.memory.diff(first, { to: second, path: "entities/alice.md" });
    assert.equal(one.changes.length, 1);
    const [change] = one.changes;
    assert.deepEqual([change.size_before, change.size_after], [LINKED_ALICE.length, "Alice moved to Oslo.\n".length]);
    assert.match(change.patch, /^-Alice likes \[\[bob\]\] and zanzibar\.$/m);
    assert.match(change.patch, /^\+Alice moved to Oslo\.$/m);
    assert.deepEqual(hitPaths(await box.memory.search("oslo")), ["entities/alice.md"]);

    const restored = await box.memory.restore(first);
    assert.equal(restored.restored, first.id);
    assert.equal(restored.before.reason, "before_restore");
    assert.equal(restored.before.root, second.root);
    assert.equal(restored.removed, 1);
    assert.equal(await box.memory.readText("entities/alice.md"), LINKED_ALICE);
    await assert.rejects(box.memory.read("entities/carol.md"), NotFound);
    assert.deepEqual(hitPaths(await box.memory.search("zanzibar")), ["entities/alice.md"]);

    // Undone for one file: the snapshot taken before the restore holds it.
    const again = await box.memory.restore(restored.before, { path: "entities/carol.md" });
    assert.deepEqual([again.restored, again.files, again.removed], [restored.before.id, 1, 0]);
    assert.equal(await box.memory.readText("entities/carol.md"), "Carol\n");
    assert.equal(await box.memory.readText("entities/alice.md"), LINKED_ALICE);
    await assert.rejects(box.memory.restore(first, { path: "entities/carol.md" }), NotFound);
    const reasons = (await box.memory.snapshots()).map((s) => s.reason);
    assert.deepEqual(reasons.slice(-2), ["before_restore", "before_restore"]);
  }),
);
