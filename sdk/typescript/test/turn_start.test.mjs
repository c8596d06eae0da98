// Where a turn is followed from, against a fake daemon too old to answer `events_after`:
// the log is searched for the message's first event, else followed from its end as read.
// (A real daemon's `events_after` is tested in messages.test.mjs.)

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { test } from "node:test";

import { Berth } from "../dist/index.js";

/** The fake box's log: a turn of `m0`, then one of `m1`; a new message's once posted. */
const LOG = [
  { type: "state", data: { state: "running" } },
  { type: "user", data: { message_id: "m0" } },
  { type: "result", data: { message_id: "m0", result: "zero" } },
  { type: "user", data: { message_id: "m1" } },
  { type: "assistant", data: {} },
  { type: "result", data: { message_id: "m1", result: "one" } },
].map((e, i) => ({ seq: i + 1, created_at: "2026-01-01T00:00:00Z", ...e }));

/** A daemon of one box `b` whose POST answers no `events_after`; `streams` logs each `after`. */
async function oldDaemon(streams) {
  const log = [...LOG];
  const server = createServer(async (request, response) => {
    const url = new URL(request.url, "http://fake");
    let text = "";
    for await (const chunk of request) text += chunk;
    const json = (status, body) => response.writeHead(status, { "Content-Type": "application/json" }).end(JSON.stringify(body));
    if (url.pathname === "/v1/boxes/b" && request.method === "GET") return json(200, { id: "b", name: "b", state: "running" });
    if (url.pathname === "/v1/boxes/b/messages" && request.method === "POST") {
      if (JSON.parse(text).id === undefined) {
        // A new message (`m2`): its turn comes after the post, past what pages show.
        log.push({ seq: 7, type: "user", data: { message_id: "m2" }, created_at: "" });
        log.push({ seq: 8, type: "result", data: { message_id: "m2", result: "two" }, created_at: "" });
        return json(202, { id: "m2", seq: 3 });
      }
      return json(202, { id: "m1", seq: 2 });
    }
    if (url.pathname === "/v1/boxes/b/events") {
      const after = Number(url.searchParams.get("after"));
      if (url.searchParams.get("wait") === "false") {
        // Pages of two, as if the daemon's page bound were small; m2's are not stored yet.
        const stored = log.filter((e) => e.seq <= LOG.length && e.seq > after).slice(0, 2);
        const next = stored.length ? stored.at(-1).seq : after;
        return json(200, { events: stored, next_after: next, more: next < LOG.length });
      }
      streams.push(after);
      response.writeHead(200, { "Content-Type": "text/event-stream" });
      for (const e of log.filter((e) => e.seq > after)) response.write(`id: ${e.seq}\ndata: ${JSON.stringify(e)}\n\n`);
      return; // left open, as a live stream is; the client closes it
    }
    json(404, { error: { code: "not_found", message: "no such thing" } });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return server;
}

test("without events_after, a turn starts just before its message's first event", async () => {
  const streams = [];
  const server = await oldDaemon(streams);
  try {
    const berth = new Berth({ url: `http://127.0.0.1:${server.address().port}`, apiKey: "berth_fake" });
    const box = await berth.boxes.get("b");
    const repost = await box.send("one", { id: "m1" });
    const seqs = [];
    for await (const event of repost) seqs.push(event.seq);
    assert.deepEqual(seqs, [4, 5, 6]);
    assert.equal(repost.text, "one");

    // A message not in the log yet: followed from the log's end as read after the post.
    const fresh = await box.send("two");
    assert.equal((await fresh.wait()).seq, 8);
    assert.equal(fresh.text, "two");
    assert.deepEqual(streams, [3, 6]);
  } finally {
    server.closeAllConnections?.();
    server.close();
  }
});
