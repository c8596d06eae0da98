// Tenants (there is no tenant delete: each test makes its own, named uniquely), their
// quotas and API keys, and the daemon-wide reads: health, runtimes, templates.

import assert from "node:assert/strict";
import { test } from "node:test";

import { AuthenticationError, Berth, NotFound, PermissionDenied } from "../dist/index.js";
import { TEST_TIMEOUT_MS, client, unique } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

test("a tenant is made, read, listed and its quota changed", options, async () => {
  const admin = client();
  const name = unique("acme");
  const tenant = await admin.tenants.create(name, { max_boxes: 3, max_running: 1 });
  assert.match(tenant.id, /^tn_/);
  assert.equal(tenant.name, name);
  assert.match(tenant.apiKey, /^berth_/);
  assert.equal(tenant.info.quota.max_boxes, 3);
  assert.equal(tenant.info.usage.boxes, 0);

  assert.equal((await admin.tenants.get(name)).id, tenant.id);
  assert.equal((await admin.tenants.get(tenant.id)).apiKey, null); // shown once only
  assert.ok((await admin.tenants.list()).some((t) => t.id === tenant.id));

  await tenant.update({ max_boxes: null, max_running: 4 });
  assert.equal(tenant.info.quota.max_boxes, null);
  assert.equal(tenant.info.quota.max_running, 4);
  assert.equal((await tenant.refresh()).info.quota.max_running, 4);

  // The tenant's own key reads itself, not the others, and makes no tenants.
  const own = new Berth({ url: admin.url, apiKey: tenant.apiKey });
  assert.equal((await own.tenants.get(name)).id, tenant.id);
  await assert.rejects(own.tenants.get("default"), NotFound);
  await assert.rejects(own.tenants.list(), PermissionDenied);
});

test("a tenant's keys are made, listed and revoked", options, async () => {
  const admin = client();
  const tenant = await admin.tenants.create(unique("keys"));
  const made = await tenant.keys.create();
  assert.match(made.apiKey, /^berth_/);
  assert.match(made.key.id, /^key_/);
  assert.equal(made.key.admin, false);
  assert.ok(made.apiKey.startsWith(made.key.prefix), made.key.prefix);
  const listed = await tenant.keys.list();
  assert.equal(listed.length, 2); // the first key, and this one
  assert.ok(listed.some((key) => key.id === made.key.id));

  const second = new Berth({ url: admin.url, apiKey: made.apiKey });
  assert.deepEqual(await second.boxes.list(), []);
  assert.equal(await tenant.keys.revoke(made.key.id), 0);
  await assert.rejects(second.boxes.list(), AuthenticationError);
  assert.deepEqual((await tenant.keys.list()).map((key) => key.id), listed.filter((k) => k.id !== made.key.id).map((k) => k.id));
});

test("health, runtimes and templates", options, async () => {
  const admin = client();
  const health = await admin.health();
  assert.equal(health.status, "ok");
  assert.ok(health.version.length > 0);

  const runtimes = await admin.runtimes();
  const sandbox = runtimes.find((r) => r.name === "sandbox");
  assert.ok(sandbox && sandbox.available, JSON.stringify(runtimes));
  assert.equal(runtimes.filter((r) => r.default).length, 1);

  const templates = await admin.templates.list();
  const names = templates.map((t) => t.name);
  assert.ok(names.includes("echo") && names.includes("host"), JSON.stringify(names));
  assert.ok(templates.find((t) => t.name === "echo").harness);
  const reloaded = await admin.templates.reload();
  assert.deepEqual(reloaded.templates.map((t) => t.name).sort(), [...names].sort());
  assert.deepEqual(reloaded.errors, []);
});
