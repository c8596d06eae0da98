// Background processes: they outlive their readers, and their output resumes where a
// reader left off; stdin, signals and the exit.

import assert from "node:assert/strict";
import { test } from "node:test";

import { TEST_TIMEOUT_MS, client, readUntil, waitUntil, withBox } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

async function collect(iterable) {
  const all = [];
  for await (const item of iterable) all.push(item);
  return all;
}

test("a process outlives its reader and its output resumes", options, () =>
  withBox(async (box) => {
    const process = await box.spawn(
      "echo one; echo two >&2; echo three; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo four; exit 5",
    );
    assert.match(process.id, /^pr_/);
    assert.equal(process.exit, null);

    // stdout and stderr are two pipes: their lines may come in either order.
    const first = await readUntil(process.output(), "two\n", "three\n");
    assert.deepEqual(first.trim().split("\n").sort(), ["one", "three", "two"]);
    // The reader left; another client sees the process still running.
    const listed = await (await client().boxes.get(box.name)).processes();
    assert.equal(listed.find((p) => p.id === process.id).exit, null);

    await box.exec("touch /tmp/go");
    const rest = (await collect(process.output())).map((chunk) => [chunk.stream, chunk.text]);
    assert.deepEqual(rest, [["stdout", "four\n"]]);
    assert.equal(process.exit.code, 5);
    assert.equal(process.exit.outputEnd, process.offset);

    // From the start, stdout and stderr in the order they came.
    const whole = (await collect(process.output(0))).map((chunk) => [chunk.stream, chunk.text]);
    assert.deepEqual(whole.map(([, text]) => text).join("").trim().split("\n").sort(), ["four", "one", "three", "two"]);
    assert.ok(whole.some(([stream, text]) => stream === "stderr" && text === "two\n"), JSON.stringify(whole));
    assert.equal((await process.wait()).status, 5);
  }),
);

test("stdin is written and closed", options, () =>
  withBox(async (box) => {
    const process = await box.spawn(["cat"], { openStdin: true });
    await process.writeStdin("hello ");
    // Chunks as they come, streamed to the process.
    async function* chunks() {
      yield new TextEncoder().encode("wor");
      yield new TextEncoder().encode("ld");
    }
    await process.writeStdin(chunks(), { close: true });
    assert.equal((await process.wait()).code, 0);
    const text = (await collect(process.output(0))).map((chunk) => chunk.text).join("");
    assert.equal(text, "hello world");
  }),
);

test("a killed process ends with its signal", options, () =>
  withBox(async (box) => {
    const process = await box.spawn("sleep 300", { keepAwake: false });
    await waitUntil(async () => (await box.processes()).some((p) => p.id === process.id), "the process is listed");
    await process.kill();
    const ended = await process.wait();
    assert.equal(ended.signal, 9);
    assert.equal(ended.code, null);
    assert.equal(ended.status, 137);
  }),
);

test("a terminated process sees TERM", options, () =>
  withBox(async (box) => {
    const process = await box.spawn("trap 'echo got term; exit 0' TERM; echo ready; while :; do sleep 0.05; done");
    await readUntil(process.output(), "ready");
    await process.signal("SIGTERM");
    assert.equal((await process.wait()).code, 0);
    const text = (await collect(process.output(0))).map((chunk) => chunk.text).join("");
    assert.ok(text.includes("got term"), text);
  }),
);
