// Webhooks: registered (the secret only in that answer), read, tested and deleted. The
// endpoint's name never resolves, so the test delivery comes back failed with why.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Berth, InvalidRequest, NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, client, unique } from "./helpers.mjs";

const ENDPOINT = "https://hooks.example.invalid/in";

test("a webhook is made, read, tested and deleted", { timeout: TEST_TIMEOUT_MS }, async () => {
  // A tenant of its own: a webhook hears of its tenant's boxes only, so no other test's
  // events land among its deliveries.
  const admin = client();
  const berth = new Berth({ url: admin.url, apiKey: (await admin.tenants.create(unique("hooks"))).apiKey });
  const webhook = await berth.webhooks.create(ENDPOINT, {
    events: ["turn.completed", "box.failed"],
    description: "sdk test",
  });
  try {
    assert.match(webhook.id, /^wh_/);
    assert.match(webhook.secret, /^whsec_/);
    assert.equal(webhook.url, ENDPOINT);
    assert.deepEqual([...webhook.events].sort(), ["box.failed", "turn.completed"]);
    assert.equal(webhook.info.description, "sdk test");
    assert.equal(Object.hasOwn(webhook.info, "secret"), false);

    const again = await berth.webhooks.get(webhook.id);
    assert.equal(again.secret, null); // shown once only
    assert.equal(again.url, ENDPOINT);
    assert.ok((await berth.webhooks.list()).some((w) => w.id === webhook.id));

    const delivery = await webhook.test();
    assert.equal(delivery.event, "webhook.test");
    assert.notEqual(delivery.state, "delivered");
    assert.ok(delivery.last_error, JSON.stringify(delivery));
    assert.equal(delivery.attempts, 1);
    const deliveries = await webhook.deliveries({ limit: 10 });
    assert.deepEqual(deliveries.map((d) => d.id), [delivery.id]);
    assert.ok(deliveries[0].last_error);

    await assert.rejects(berth.webhooks.create(ENDPOINT, { events: ["no.such.event"] }), InvalidRequest);
    await assert.rejects(berth.webhooks.create("http://127.0.0.1:9/in", { events: ["box.failed"] }), InvalidRequest);
  } finally {
    await webhook.delete().catch((error) => {
      if (!(error instanceof NotFound)) throw error;
    });
  }
  await assert.rejects(berth.webhooks.get(webhook.id), NotFound);
  await assert.rejects(berth.webhooks.delete(webhook.id), NotFound);
});
