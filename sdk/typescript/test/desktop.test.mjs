// The desktop calls (computer use) on a box of the `host` template, which has no desktop:
// each one is `Conflict` saying so and what to use instead, and none wakes the box. (A real
// desktop takes minutes to build; berth's own end-to-end tests drive one.) The request
// shapes and the error type are those of a desktop box's calls; the VNC WebSocket's refusal
// comes before its upgrade, as the API's error.

import assert from "node:assert/strict";
import { test } from "node:test";

import { Conflict, InvalidRequest } from "../dist/index.js";
import { TEST_TIMEOUT_MS, withBoxes } from "./helpers.mjs";

const options = { timeout: TEST_TIMEOUT_MS };

test("a box without a desktop refuses every desktop call and stays asleep", options, () =>
  withBoxes(async (make) => {
    const box = await make("desk");
    const noDesktop = (error, service = "xvfb") => {
      assert.ok(error instanceof Conflict, String(error));
      assert.equal(error.code, "conflict");
      assert.equal(error.status, 409);
      assert.equal(
        error.message,
        `box ${box.name} has no desktop (template host has no ${service} service); use --template desktop`,
      );
      return true;
    };
    await assert.rejects(box.desktop.status(), noDesktop);
    await assert.rejects(box.desktop.screenshot(), noDesktop);
    await assert.rejects(box.desktop.screenshot({ cursor: true }), noDesktop);
    await assert.rejects(box.desktop.actions([{ type: "click", x: 10, y: 20 }]), noDesktop);
    await assert.rejects(box.desktop.cursor(), noDesktop);
    // The screen over VNC needs the desktop's VNC server.
    await assert.rejects(box.desktop.vnc(), (error) => noDesktop(error, "vnc"));
    // A refused action is the caller's, with the action's index, before the box is asked.
    await assert.rejects(
      box.desktop.actions([
        { type: "wait", ms: 1 },
        { type: "key", keys: "ctrl+;" },
      ]),
      (error) => {
        assert.ok(error instanceof InvalidRequest, String(error));
        assert.deepEqual(error.details, { index: 1, type: "key" });
        return true;
      },
    );
    assert.equal((await box.refresh()).state, "stopped", "nothing woke the box");
  }),
);
