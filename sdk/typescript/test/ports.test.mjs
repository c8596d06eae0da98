// A box's port through berth, and share links to it.

import assert from "node:assert/strict";
import { test } from "node:test";

import { NotFound } from "../dist/index.js";
import { TEST_TIMEOUT_MS, waitUntil, withBox } from "./helpers.mjs";

const keyed = { headers: { Authorization: `Bearer ${process.env.BERTH_API_KEY}` } };

/** A GET's status, or 0 when the connection failed. */
async function status(url, init) {
  try {
    const response = await fetch(url, init);
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

test("a port is reached with the key or a share link", { timeout: TEST_TIMEOUT_MS }, () =>
  withBox(async (box) => {
    await box.files.mkdir("/tmp/site");
    await box.files.write("/tmp/site/index.html", "hi from the box\n");
    await box.spawn("cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1");
    const urls = await box.portUrl(8000);
    assert.equal(urls.port, 8000);
    assert.ok(urls.url.endsWith("/ports/8000/"), urls.url);
    assert.equal(urls.hostUrl, null);

    await waitUntil(async () => (await status(urls.url, keyed)) === 200, "the box's server answers");
    assert.equal(await (await fetch(urls.url + "index.html", keyed)).text(), "hi from the box\n");
    // The same through the SDK, which sends the key; the app's own 404 is an answer.
    const page = await box.portFetch(8000, "/index.html?v=1");
    assert.equal(page.status, 200);
    assert.equal(await page.text(), "hi from the box\n");
    const missing = await box.portFetch(8000, "nothing-here", { headers: { authorization: "Basic eDp5" } });
    assert.equal(missing.status, 404);
    await missing.arrayBuffer();

    const link = await box.share(8000, { ttlS: 600 });
    assert.equal(link.state, "live");
    assert.ok(link.url && link.url.includes("berth_link="), link.url);
    // A browser's visit: the link answers 303 with a cookie, which opens the port.
    const opened = await fetch(link.url, { redirect: "manual" });
    assert.equal(opened.status, 303);
    const cookie = opened.headers.get("set-cookie").split(";")[0];
    const browser = { headers: { cookie } };
    assert.equal(await (await fetch(new URL(opened.headers.get("location"), link.url), browser)).text(), "hi from the box\n");
    assert.equal(await (await fetch(urls.url + "index.html", browser)).text(), "hi from the box\n");
    assert.deepEqual((await box.links(8000)).map((l) => l.id), [link.id]);
    assert.deepEqual((await box.links()).map((l) => l.id), [link.id]);
    assert.equal((await box.revoke(link.id)).state, "revoked");
    assert.ok([401, 403].includes(await status(urls.url + "index.html", browser)));

    // A link revoked by its port: another port's path does not find it.
    const second = await box.share(8000, { ttlS: 60 });
    await assert.rejects(box.revoke(second.id, { port: 9000 }), NotFound);
    assert.equal((await box.revoke(second.id, { port: 8000 })).state, "revoked");
  }),
);
