// Issue 20: a box's app answering with Set-Cookie cannot sign a visitor in as its tenant,
// nor out; two session cookies get a screen with the way out (lib/fixation.mjs). Each
// victim is a browser of its own.
import { test } from '@playwright/test';

import { api } from '../lib/api.mjs';
import { watchConsole, screen } from '../lib/checks.mjs';
import { ADMIN, BASE, check, need, phone, SHOTS, signedOutProbe } from '../lib/env.mjs';
import { fixationScene } from '../lib/fixation.mjs';

test.describe.configure({ mode: 'serial' });

let scene;

test.beforeAll(async () => {
  scene = await fixationScene({ base: BASE, admin: api(BASE, ADMIN), berthBin: need('BERTH_BIN'), dataDir: need('BERTH_DATA_DIR'), appFile: need('BERTH_COOKIE_APP') });
});

test.afterAll(async () => {
  await scene?.cleanup();
});

/** A browser of the victim's own; its console must stay clean but for what `allow` lets. */
async function victimBrowser(browser, allow = []) {
  const victim = await browser.newContext(phone);
  const watched = watchConsole(victim);
  for (const [allows, why] of allow) watched.expect(allows, why);
  return {
    victim,
    async close() {
      await victim.close();
      check(watched.errors.length === 0, `console errors:\n  ${watched.errors.join('\n  ')}`);
    },
  };
}

test("victim 2 opens A's link first, then pairs as B: stays B", async ({ browser }) => {
  const { victim, close } = await victimBrowser(browser);
  await scene.opensFirst(victim);
  await close();
});

test("victim 1 signed in as B follows A's link from another site: stays B", async ({ browser }) => {
  const { victim, close } = await victimBrowser(browser);
  await scene.signedInFirst(victim);
  await close();
});

test('two session cookies: the app says why, and Try again and Sign out get out', async ({ browser }) => {
  const { victim, close } = await victimBrowser(browser, [
    [(text, url) => /status of 400/.test(text) && /\/v1\/web\/session$/.test(url), 'the refused session check'],
    [signedOutProbe, 'the signed-out session probe'],
  ]);
  const page = await victim.newPage();
  await scene.pairAsB(page);
  const plant = () => victim.addCookies([{ name: 'berth_session', value: `bws_${'0'.repeat(64)}`, domain: new URL(BASE).hostname, path: '/v1/', secure: true, httpOnly: true, sameSite: 'Lax' }]);
  await plant();
  // Loaded afresh, the app's first call is the session check. (A call of a screen already
  // shown is refused the same way, and its answer expires the planted cookie: the app
  // checks again and goes on.)
  await page.reload();
  const title = page.getByRole('heading', { name: 'This browser has two sign-ins' });
  await title.waitFor();
  const shown = await page.locator('main').innerText();
  check(/sign out/.test(shown) && /clear this site's cookies/.test(shown), `the screen says: ${shown}`);
  const problems = await screen(page, SHOTS, 'cookie-conflict');
  check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
  await page.getByRole('button', { name: 'Try again' }).click();
  await page.getByRole('list', { name: 'Boxes' }).getByRole('link', { name: 'b-box', exact: true }).waitFor();
  check(!(await victim.cookies()).some((c) => c.name === 'berth_session'), 'the planted cookie outlived the refusal');
  await plant();
  await page.reload();
  await title.waitFor();
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  await close();
});
