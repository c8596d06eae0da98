// A box's services, on the `svc` template (crates/cli/tests/sdk_typescript.rs puts it in the
// daemon's data dir: one service, `hello`, that says hello and sleeps): listed `stopped`
// without waking the box, running once it is, its log read and followed, and a restart.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Conflict, NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, readUntil, waitUntil, withBoxes } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

async function logText(box, name, options = {}) {
  let text = "";
  for await (const chunk of box.serviceLogs(name, options)) text += chunk.text;
  return text;
}

test("services are listed asleep, then run, log and restart awake", options, () =>
  withBoxes(async (make) => {
    const box = await make("svc", { template: "svc" });
    const listed = await box.services();
    assert.deepEqual(
      listed.map((s) => [s.name, s.state, s.pid, s.restarts, s.log_end]),
      [["hello", "stopped", null, 0, 0]],
    );
    assert.equal((await box.refresh()).state, "stopped", "listing does not wake the box");
    // Its log lives in the running box: none to read while it is stopped.
    await assert.rejects(logText(box, "hello"), Conflict);
    await assert.rejects(box.restartService("nope"), NotFound);
    assert.equal((await box.refresh()).state, "stopped", "an unknown name wakes nothing");

    await box.start();
    await waitUntil(async () => (await box.services())[0].state === "running", "the service runs");
    await waitUntil(async () => (await logText(box, "hello")).includes("hello\n"), "the log says hello");
    const [before] = await box.services();
    assert.ok(before.pid !== null && before.log_end > 0, JSON.stringify(before));

    const restarted = await box.restartService("hello");
    assert.equal(restarted.name, "hello");
    assert.equal(restarted.restarts, before.restarts + 1);
    // Followed from where the log was before the restart: the new life says hello again.
    const text = await readUntil(box.serviceLogs("hello", { offset: before.log_end, follow: true }), "hello\n");
    assert.ok(text.includes("hello\n"), text);
    await waitUntil(async () => (await box.services())[0].state === "running", "the service runs again");
    assert.notEqual((await box.services())[0].pid, before.pid);
  }),
);
