// Error answers become the errors of their codes.

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  AuthenticationError,
  Berth,
  BerthError,
  BoxFailed,
  Conflict,
  InvalidRequest,
  NotFound,
  QuotaExceeded,
  Timeout,
  Unavailable,
  errorFrom,
} from "../dist/index.js";
import { TEST_TIMEOUT_MS, client, unique, withBoxes } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

test("a missing box is not found", options, async () => {
  await assert.rejects(client().boxes.get(unique("nobody")), (error) => {
    assert.ok(error instanceof NotFound);
    assert.equal(error.status, 404);
    assert.equal(error.code, "not_found");
    return true;
  });
});

test("a taken name is a conflict", options, () =>
  withBoxes(async (make, berth) => {
    const box = await make();
    await assert.rejects(berth.boxes.create(box.name), (error) => error instanceof Conflict && error.code === "already_exists");
  }),
);

test("a bad name is an invalid request", options, async () => {
  await assert.rejects(client().boxes.create("Not A DNS Label"), InvalidRequest);
});

test("a wrong key is an authentication error", options, async () => {
  const stranger = new Berth({ url: client().url, apiKey: "berth_0000" });
  await assert.rejects(stranger.boxes.list(), AuthenticationError);
});

test("a tenant over its quota gets quota exceeded", options, async () => {
  const made = await client().tenants.create(unique("full"), { max_boxes: 0 });
  const tenant = new Berth({ url: client().url, apiKey: made.apiKey });
  await assert.rejects(tenant.boxes.create(unique("over")), (error) => {
    assert.ok(error instanceof QuotaExceeded);
    assert.equal(error.details.limit, "max_boxes");
    return true;
  });
});

test("a start that fails is BoxFailed with the reason", options, () =>
  withBoxes(async (make) => {
    // A credential rule whose secret the tenant does not have: the start fails at `egress`.
    const box = await make("ts", {
      egress: {
        allow: ["api.example.com"],
        credentials: [
          { name: "absent", hosts: ["api.example.com"], header: "x-api-key", placeholder_env: "EXAMPLE_KEY" },
        ],
      },
    });
    await assert.rejects(box.start(), (error) => {
      assert.ok(error instanceof BoxFailed && error instanceof Unavailable, String(error));
      assert.ok(error.reason && error.reason.includes("absent"), error.reason);
      assert.equal(error.failure.step, "egress");
      return true;
    });
    assert.equal((await box.refresh()).state, "failed");
  }),
);

test("codes without a live case map too", () => {
  // A 504 needs an agent that hangs; the mapping itself is checked here.
  assert.ok(errorFrom(504, '{"error":{"code":"timeout","message":"the box\'s agent timed out"}}') instanceof Timeout);
  const unknown = errorFrom(418, '{"error":{"code":"from_the_future","message":"m"}}');
  assert.equal(unknown.constructor, BerthError);
  assert.equal(unknown.code, "from_the_future");
  assert.equal(errorFrom(502, "<html>bad gateway</html>").message, "<html>bad gateway</html>");
});

test("bad client settings are clear errors, never hangs", options, async () => {
  assert.throws(() => new Berth({ url: "not a url", apiKey: "k" }), /not an http\(s\) URL/);
  assert.throws(() => new Berth({ url: "http://127.0.0.1:1", apiKey: "" }), /no API key/);
  // Nothing listens on port 1: refused at once, said so.
  const nowhere = new Berth({ url: "http://127.0.0.1:1", apiKey: "k" });
  await assert.rejects(nowhere.boxes.list(), (error) => error instanceof Unavailable && /cannot reach berth/.test(error.message));
});
