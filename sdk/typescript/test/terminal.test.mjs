// A terminal round trip: keys in, screen out, a resize, a reattach, the exit.

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidRequest, NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, readUntil, withBox } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

test("a terminal round trip", options, () =>
  withBox(async (box) => {
    const terminal = await box.terminal({ cols: 100, rows: 30, cmd: ["sh"] });
    assert.match(terminal.id, /^tm_/);
    terminal.write("stty size; echo ma''rk-$((6*7))\n");
    assert.ok((await readUntil(terminal.read(), "mark-42")).includes("30 100"));
    terminal.resize(120, 40);
    terminal.write("stty size; echo ma''rk-two\n");
    assert.ok((await readUntil(terminal.read(), "mark-two")).includes("40 120"));

    // Left and taken up again: what came meanwhile is not lost.
    terminal.write("echo while-a''way\n");
    terminal.close();
    const again = await box.terminal({ attach: terminal });
    assert.equal(again.id, terminal.id);
    await readUntil(again.read(), "while-away");
    again.write("exit 3\n");
    for await (const _ of again.read()) {
      // to its end
    }
    assert.equal(again.exitCode, 3);
  }),
);

test("a signal reaches the terminal's foreground job", options, () =>
  withBox(async (box) => {
    const terminal = await box.terminal({ cmd: ["sh", "-c", "trap 'echo got-int; exit 9' INT; echo ready; while :; do sleep 0.05; done"] });
    await readUntil(terminal.read(), "ready");
    terminal.signal("SIGINT");
    await readUntil(terminal.read(), "got-int");
    for await (const _ of terminal.read()) {
      // to its end
    }
    assert.equal(terminal.exitCode, 9);
  }),
);

test("a refused terminal rejects with the API's error", options, () =>
  withBox(async (box) => {
    await assert.rejects(box.terminal({ cols: 0 }), InvalidRequest);
    await assert.rejects(box.terminal({ attach: { id: "tm_nosuchterminal", offset: 0 } }), NotFound);
  }),
);
