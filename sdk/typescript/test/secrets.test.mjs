// The tenant's secrets: set (made, then replaced), listed without values, deleted.

import assert from "node:assert/strict";
import { test } from "node:test";

import { InvalidRequest, NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, client, unique } from "./helpers.mjs";

test("a secret is set, replaced, listed and deleted", { timeout: TEST_TIMEOUT_MS }, async () => {
  const berth = client();
  const name = unique("token");
  try {
    const made = await berth.secrets.set(name, "sk-first");
    assert.equal(made.name, name);
    assert.equal(Object.hasOwn(made, "value"), false);
    const replaced = await berth.secrets.set(name, "sk-second");
    assert.equal(replaced.created_at, made.created_at);
    const listed = await berth.secrets.list();
    assert.deepEqual(listed.filter((s) => s.name === name).map((s) => Object.keys(s).sort()), [
      ["created_at", "name", "updated_at"],
    ]);
    await assert.rejects(berth.secrets.set(name, " padded "), InvalidRequest);
  } finally {
    await berth.secrets.delete(name).catch((error) => {
      if (!(error instanceof NotFound)) throw error;
    });
  }
  assert.ok(!(await berth.secrets.list()).some((s) => s.name === name));
  await assert.rejects(berth.secrets.delete(name), NotFound);
});
