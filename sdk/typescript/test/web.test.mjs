// Pairing a browser to the web app, and ending its session. The browser's side (trading
// the code for a cookie) is the web app's, not the SDK's: the test plays it with fetch.

import assert from "node:assert/strict";
import { test } from "node:test";

import { AuthenticationError, Berth, NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, client, unique } from "./helpers.mjs";

/** Signs a "browser" in with a pairing code; answers its session cookie. */
async function signIn(url, code) {
  const answer = await fetch(`${url}/v1/web/sessions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ pairing_code: code, device: "sdk test" }),
  });
  assert.equal(answer.status, 201, await answer.clone().text());
  const session = await answer.json();
  return { id: session.id, cookie: answer.headers.get("set-cookie").split(";")[0] };
}

test("a browser is paired, listed and its session revoked", { timeout: TEST_TIMEOUT_MS }, async () => {
  const admin = client();
  // A tenant of its own, so that no other test's sessions are in its list.
  const tenant = await admin.tenants.create(unique("web"));
  const own = new Berth({ url: admin.url, apiKey: tenant.apiKey });
  const pairing = await own.web.pair({ ttlS: 60 });
  assert.match(pairing.code, /^bwp_/);
  assert.ok(pairing.url.endsWith(`#/pair/${pairing.code}`), pairing.url);
  // The admin pairs a browser for another tenant by name.
  assert.match((await admin.web.pair({ tenant: tenant.name })).code, /^bwp_/);

  const browser = await signIn(admin.url, pairing.code);
  const sessions = await own.web.sessions();
  assert.deepEqual(sessions.map((s) => s.id), [browser.id]);
  assert.equal(sessions[0].opened_with, "pairing");
  assert.equal(sessions[0].device, "sdk test");
  assert.equal(sessions[0].tenant, tenant.name);

  const seen = await fetch(`${admin.url}/v1/boxes`, { headers: { cookie: browser.cookie } });
  assert.equal(seen.status, 200);
  await own.web.revokeSession(browser.id);
  assert.deepEqual(await own.web.sessions(), []);
  const refused = await fetch(`${admin.url}/v1/boxes`, { headers: { cookie: browser.cookie } });
  assert.equal(refused.status, 401);
  await assert.rejects(own.web.revokeSession(browser.id), NotFound);
  await assert.rejects(new Berth({ url: admin.url, apiKey: "berth_wrong" }).web.pair(), AuthenticationError);
});
