// Messages to the box's agent (the `echo` template's harness): a turn streamed to its
// `result`, the event log read again from any seq, the messages listed, and wakeups.

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidRequest, NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, waitUntil, withBoxes } from "./helpers.mjs";

test("a turn streams to its result and the log resumes", { timeout: TEST_TIMEOUT_MS }, () =>
  withBoxes(async (make) => {
    const box = await make("chat", { template: "echo" });
    const turn = await box.send("hello there", { id: "greeting-1" });
    assert.equal(turn.messageId, "greeting-1");
    const events = [];
    for await (const event of turn) events.push(event);
    const kinds = JSON.stringify(events.map((e) => e.type));
    assert.equal(events.at(-1).type, "result", kinds);
    assert.equal(turn.result, events.at(-1));
    assert.equal(turn.text, "echo: hello there");
    const replay = events.filter((e) => e.type === "user");
    assert.ok(replay.length > 0 && replay[0].messageId === "greeting-1", kinds);
    assert.ok(events.some((e) => e.type === "assistant"), kinds);

    // The same key again is the same message; a second turn follows the first.
    const second = await box.send("stream 3");
    assert.equal((await second.wait()).type, "result");
    assert.ok(second.text.startsWith("chunk 001 of 003"), second.text);
    const more = [];
    for await (const event of second) more.push(event);
    assert.deepEqual(more, []); // a finished turn has nothing more

    // A repost of the answered first message is the same message, and its turn still
    // reaches its result: it is followed from where the message was first stored.
    const repost = await box.send("hello there", { id: "greeting-1" });
    assert.equal(repost.seq, turn.seq);
    assert.equal((await repost.wait()).seq, turn.result.seq);
    assert.equal(repost.text, "echo: hello there");

    const messages = await box.messages();
    assert.deepEqual(messages.map((m) => m.id), ["greeting-1", second.messageId]);
    assert.deepEqual(messages.map((m) => m.state), ["delivered", "delivered"]);
    assert.equal(messages[0].content, "hello there");
    assert.deepEqual((await box.messages({ after: turn.seq, limit: 1 })).map((m) => m.id), [second.messageId]);

    // The log again, from after the first result: resumed exactly there.
    const after = turn.result.seq;
    const again = [];
    for await (const event of box.events({ after })) {
      again.push(event.seq);
      if (again.length === 3) break;
    }
    assert.deepEqual(again, [after + 1, after + 2, after + 3]);
    const page = await box.eventPage({ after: 0 });
    assert.equal(page.events[0].seq, 1);
    assert.ok((await box.lastEventSeq()) >= second.result.seq);
  }),
);

test("a wakeup posts its message later; pending ones are listed and cancelled", { timeout: TEST_TIMEOUT_MS }, () =>
  withBoxes(async (make) => {
    const box = await make("wake", { template: "echo" });
    const soon = await box.wakeups.create("wake up", { inS: 1 });
    assert.match(soon.id, /^wk_/);
    assert.equal(soon.kind, "in");
    assert.equal(soon.box_id, box.id);
    const daily = await box.wakeups.create("daily", { cron: "0 9 * * *", tz: "Europe/Paris" });
    assert.equal(daily.tz, "Europe/Paris");
    const later = await box.wakeups.create("later", { at: new Date(Date.now() + 86_400_000) });
    assert.equal(later.kind, "at");
    await assert.rejects(box.wakeups.create("both", { inS: 60, cron: "0 9 * * *" }), InvalidRequest);

    // It fires on its own: its message is posted under the key `wake:<id>:<slot>`.
    let woken;
    await waitUntil(async () => {
      woken = (await box.messages()).find((m) => m.id.startsWith(`wake:${soon.id}:`));
      return woken !== undefined;
    }, "the wakeup's message", 60_000);
    assert.equal(woken.content, "wake up");
    const fired = [];
    for await (const event of box.events()) {
      if (event.type === "wakeup" && event.data.wakeup_id === soon.id) fired.push(event);
      if (event.type === "result" && event.messageId === woken.id) break;
    }
    assert.equal(fired.length, 1);

    // Fired, the one-shot wakeup is no longer pending; the others are, soonest first.
    assert.deepEqual((await box.wakeups.list()).map((w) => w.id).sort(), [daily.id, later.id].sort());
    assert.equal((await box.wakeups.delete(daily.id)).id, daily.id);
    assert.deepEqual((await box.wakeups.list()).map((w) => w.id), [later.id]);
    await assert.rejects(box.wakeups.delete(daily.id), NotFound);
  }),
);
