// Reading answers as they come, without a daemon: bodies made here, cut where a test says.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Unavailable } from "../dist/index.js";
import { readChunks, readFrames, readServerEvents } from "../dist/streams.js";

/** A body of `parts` (strings), then cut (an error) when `cut` is set. */
function body(parts, cut = false) {
  return new ReadableStream({
    start(controller) {
      for (const part of parts) controller.enqueue(new TextEncoder().encode(part));
      if (cut) controller.error(new TypeError("terminated"));
      else controller.close();
    },
  });
}

async function all(iterable) {
  const items = [];
  for await (const item of iterable) items.push(item);
  return items;
}

test("frames split anywhere are whole lines, and a last line without its newline is dropped", async () => {
  const frames = await all(readFrames(body(['{"a":', '1}\r\n\n{"b"', ':2}\n{"c":3'])));
  assert.deepEqual(frames, [{ a: 1 }, { b: 2 }]);
});

test("a cut body is an Unavailable error, never a quiet end", async () => {
  await assert.rejects(all(readChunks(body(["some"], true))), (error) => error instanceof Unavailable && /cut/.test(error.message));
  await assert.rejects(all(readFrames(body(['{"a":1}\n'], true))), Unavailable);
});

test("server-sent events: data lines joined, comments and other fields skipped", async () => {
  const events = await all(readServerEvents(body([": keep-alive\n\n", "id: 1\nevent: x\ndata: {\"seq\":1,\n", "data: \"type\":\"x\"}\n\n"])));
  assert.deepEqual(events, [{ seq: 1, type: "x" }]);
});
