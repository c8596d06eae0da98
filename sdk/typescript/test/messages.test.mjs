// Messages to the box's agent (the `echo` template's harness): a turn streamed to its
// `result`, and the event log read again from any seq.

import assert from "node:assert/strict";
import { test } from "node:test";

import { TEST_TIMEOUT_MS, withBoxes } from "./helpers.mjs";

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
    assert.equal((await box.send("hello there", { id: "greeting-1" })).seq, turn.seq);
    const second = await box.send("stream 3");
    assert.equal((await second.wait()).type, "result");
    assert.ok(second.text.startsWith("chunk 001 of 003"), second.text);
    const more = [];
    for await (const event of second) more.push(event);
    assert.deepEqual(more, []); // a finished turn has nothing more

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
