// Boxes: create, get, list, update, the lifecycle verbs, delete.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Conflict, NotFound, Unsupported } from "../dist/index.js";
import { TEST_TIMEOUT_MS, unique, waitUntil, withBoxes } from "./helpers.mjs";

test("create, get, list, update and delete", { timeout: TEST_TIMEOUT_MS }, () =>
  withBoxes(async (make, berth) => {
    const team = unique("team");
    const box = await make("crud", {
      template: "host",
      runtime: "sandbox",
      limits: { memory_mib: 256, pids: 128 },
      labels: { team },
      env: { GREETING: "hello" },
    });
    assert.equal(box.state, "stopped");
    assert.match(box.id, /^bx_/);
    assert.equal(box.info.limits.memory_mib, 256);
    assert.equal(box.info.limits.pids, 128);
    assert.deepEqual(box.info.labels, { team });
    assert.deepEqual(box.info.env, { GREETING: "hello" });

    assert.equal((await berth.boxes.get(box.name)).id, box.id);
    assert.equal((await berth.boxes.get(box.id)).name, box.name);
    assert.deepEqual((await berth.boxes.list({ labels: { team } })).map((b) => b.id), [box.id]);
    assert.deepEqual(await berth.boxes.list({ labels: { team }, state: "running" }), []);

    await box.update({ labels: { team, tier: "gold" }, stop_after_s: 600 });
    assert.equal(box.info.labels.tier, "gold");
    assert.equal(box.info.stop_after_s, 600);
    assert.equal((await berth.boxes.get(box.name)).info.labels.tier, "gold");

    await berth.boxes.delete(box.name);
    await assert.rejects(berth.boxes.get(box.id), NotFound);
  }),
);

test("start, pause, resume and stop", { timeout: TEST_TIMEOUT_MS }, () =>
  withBoxes(async (make) => {
    const box = await make("life");
    assert.equal((await box.start()).state, "running");
    assert.equal((await box.exec("echo $GREETING", { env: { GREETING: "up" } })).stdout, "up\n");
    assert.equal((await box.pause()).state, "paused");
    assert.equal((await box.resume()).state, "running");
    assert.equal((await box.stop()).state, "stopped");
    assert.equal((await box.refresh()).state, "stopped");
  }),
);

test("a snapshot where the runtime has them, else a refusal", { timeout: TEST_TIMEOUT_MS }, () =>
  withBoxes(async (make, berth) => {
    const box = await (await make("snap")).start();
    const runtime = (await berth.runtimes()).find((r) => r.name === box.info.runtime);
    if (runtime.capabilities.snapshot) {
      assert.equal((await box.snapshot()).state, "snapshotted");
      assert.equal((await box.resume()).state, "running");
    } else {
      // docs/api.md says `501 unsupported`; the daemon answers `409 conflict` (the box's
      // runtime, not its state, is what refuses): either is a refusal naming the cause.
      await assert.rejects(
        box.snapshot(),
        (error) => (error instanceof Unsupported || error instanceof Conflict) && /snapshot/.test(error.message),
      );
      assert.equal((await box.refresh()).state, "running");
    }
  }),
);

test("the egress audit records a refused connection", { timeout: TEST_TIMEOUT_MS }, () =>
  withBoxes(async (make) => {
    const box = await make("egress");
    // Nothing may leave a box of the `host` template: the gateway refuses and says so.
    const tried = await box.exec("curl -sS -m 10 -o /dev/null https://example.com/");
    assert.notEqual(tried.exitCode, 0);
    let page;
    await waitUntil(async () => {
      page = await box.egressAudit();
      return page.records.length > 0;
    }, "the refusal in the egress audit");
    const refused = page.records.find((r) => r.target === "example.com");
    assert.ok(refused, JSON.stringify(page.records));
    assert.equal(refused.decision, "deny");
    assert.equal(page.next, page.records.length);
    assert.deepEqual((await box.egressAudit({ after: page.next, limit: 10 })).records, []);
  }),
);
