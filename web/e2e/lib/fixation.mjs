// Issue 20's session fixation through the ports proxy, in Chromium. Tenant A's box runs
// an app (crates/cli/tests/fixtures/cookie_app.py) whose pages answer with Set-Cookie
// naming A's own web session (the old and the new cookie name, on /v1/ and on /) or a
// pile of big cookies. Victim 1 is signed in as B and follows A's share link from another
// site; victim 2 opens the link first and pairs with a code of B's after. Both must end in
// B's tenant: the web app shows B's box, never A's, and is never signed out.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

import { api, until } from './api.mjs';

const PAGES = ['path-v1', 'path-root', 'host-name', 'pile'];
const APP_PORT = '8000';

function check(condition, why) {
  if (!condition) throw new Error(why);
}

/**
 * Tenants fix-a and fix-b (B owns box b-box, never started), A's box a-app serving the app
 * with A's own session token, and a share link to it. `cleanup()` deletes both boxes.
 */
export async function fixationScene({ base, admin, berthBin, dataDir, appFile }) {
  const a = await admin.call('POST', '/v1/tenants', { name: 'fix-a' });
  const b = await admin.call('POST', '/v1/tenants', { name: 'fix-b' });
  const A = api(base, a.api_key);
  const B = api(base, b.api_key);
  await B.call('POST', '/v1/boxes', { name: 'b-box', template: 'echo' });
  await A.call('POST', '/v1/boxes', { name: 'a-app', template: 'echo' });
  // A signs a browser of its own in, as anyone may, and hands the token to its app.
  const signedIn = await fetch(`${base}/v1/web/sessions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ api_key: a.api_key }),
  });
  check(signedIn.status === 201, `A's sign-in: ${signedIn.status}`);
  const token = signedIn.headers.getSetCookie().map((c) => /berth_session=(bws_[0-9a-f]+)/.exec(c)?.[1]).find(Boolean);
  check(token, `no session token in ${signedIn.headers.getSetCookie()}`);
  const put = await fetch(`${base}/v1/boxes/a-app/files?path=/home/user/cookie_app.py`, {
    method: 'PUT',
    headers: { Authorization: `Bearer ${a.api_key}` },
    body: fs.readFileSync(appFile),
  });
  check(put.status === 204, `PUT cookie_app.py: ${put.status} ${await put.text()}`);
  await A.call('POST', '/v1/boxes/a-app/exec', { cmd: ['python3', '/home/user/cookie_app.py', APP_PORT, token], background: true });
  const link = await A.call('POST', `/v1/boxes/a-app/ports/${APP_PORT}/links`, { ttl_s: 3600 });
  const query = link.url.slice(link.url.indexOf('?'));
  await until("A's app answers", 60_000, async () =>
    (await fetch(`${base}/v1/boxes/a-app/ports/${APP_PORT}/path-v1`, { headers: { Authorization: `Bearer ${a.api_key}` } })).ok);

  const pageUrl = (name) => `${base}/v1/boxes/a-app/ports/${APP_PORT}/${name}${query}`;

  async function pairAsB(page) {
    const out = execFileSync(berthBin, ['--data-dir', dataDir, 'pair', '--tenant', 'fix-b', '--json'], { encoding: 'utf8' });
    await page.goto(JSON.parse(out).url);
    await page.getByRole('button', { name: 'New box' }).waitFor();
  }

  /** The web app runs as B: B's box listed, A's not, this browser's session B's. */
  async function assertStillB(page, what) {
    await page.goto(`${base}/#/boxes`);
    // Loaded afresh: a list drawn before the link was followed proves nothing.
    await page.reload();
    const list = page.getByRole('list', { name: 'Boxes' });
    try {
      await list.getByRole('link', { name: 'b-box', exact: true }).waitFor({ timeout: 30_000 });
    } catch {
      const shown = (await page.locator('body').innerText().catch(() => '')).replace(/\s+/g, ' ').slice(0, 300);
      throw new Error(`${what}: B's box is not listed; the app shows: ${shown}`);
    }
    check((await list.getByRole('link', { name: 'a-app', exact: true }).count()) === 0, `${what}: A's box is listed: the app runs as A`);
    const me = await page.evaluate(async () => {
      const res = await fetch('/v1/web/session');
      return { status: res.status, body: await res.text() };
    });
    check(me.status === 200 && JSON.parse(me.body).tenant === 'fix-b', `${what}: GET /v1/web/session: ${me.status} ${me.body}`);
    const cookies = await page.context().cookies();
    check(!cookies.some((c) => c.value.includes(token)), `${what}: A's session is in the browser's cookies`);
    return `${cookies.length} cookies, none of A's`;
  }

  /** Opens A's app at `name` through the share link; `from` a page of another site. */
  async function openApp(page, name, from) {
    const url = pageUrl(name);
    if (from) {
      // A page of no site of berth's: the navigation is cross-site, as a link in a chat.
      await from.goto('about:blank');
      await from.setContent(`<a href="${url}">A's app</a>`);
      await Promise.all([from.waitForURL(/\/ports\//), from.getByRole('link', { name: "A's app" }).click()]);
      page = from;
    } else {
      await page.goto(url);
    }
    await page.waitForLoadState();
    const text = await page.locator('body').innerText();
    check(text.includes("tenant A's app"), `${name}: the app's page shows ${text.slice(0, 200)}`);
  }

  return {
    /** Victim 2: opens every page of A's app through the link, then pairs as B. */
    async opensFirst(context) {
      const page = await context.newPage();
      for (const name of PAGES) await openApp(page, name);
      await pairAsB(page);
      return assertStillB(page, 'victim 2 (opened the link, then paired)');
    },
    /** Victim 1: signed in as B, follows the link to each page from another site. */
    async signedInFirst(context) {
      const page = await context.newPage();
      await pairAsB(page);
      const elsewhere = await context.newPage();
      for (const name of PAGES) await openApp(page, name, elsewhere);
      await elsewhere.close();
      return assertStillB(page, 'victim 1 (signed in, then followed the link)');
    },
    pairAsB,
    assertStillB,
    async cleanup() {
      await A.remove('a-app').catch(() => {});
      await B.remove('b-box').catch(() => {});
    },
  };
}
