// Boxes: create, get, list, update, the lifecycle verbs, delete.

import assert from "node:assert/strict";
import { test } from "node:test";

import { NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, unique, withBoxes } from "./helpers.mjs";

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
