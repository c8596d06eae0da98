// What an agent writes cannot sign the browser in to another tenant (login CSRF through a
// link): an answer carrying a real pairing link of another tenant's, in the app's own
// fragment form, as berth's absolute address, and a same-origin path, renders those as
// text without an href; a pairing link reached inside a signed-in page (as a tapped link
// would) asks first, and Cancel keeps the session and leaves the code unused.
import { execFileSync } from 'node:child_process';

import { test } from '@playwright/test';

import { api, until } from '../lib/api.mjs';
import { log, openChat, send, shows } from '../lib/app.mjs';
import { screen, watchConsole } from '../lib/checks.mjs';
import { ADMIN, BASE, check, need, phone, SHOTS, signedOutProbe } from '../lib/env.mjs';

const admin = api(BASE, ADMIN);
const BOX = 'links-e2e';
const ATTACKER = 'links-attacker';
const boxesMade = new Set();

test.afterAll(async () => {
  for (const name of boxesMade) await admin.remove(name).catch(() => {});
});

/** A pairing code of the attacker's tenant, as `berth pair` makes it. */
function pairing() {
  const out = execFileSync(need('BERTH_BIN'), ['--data-dir', need('BERTH_DATA_DIR'), 'pair', '--tenant', ATTACKER, '--json'], { encoding: 'utf8' });
  return JSON.parse(out);
}

/** The tenant this page's session belongs to, as berth says. */
const tenantOf = (page) =>
  page.evaluate(async () => {
    const res = await fetch('/v1/web/session');
    return res.ok ? (await res.json()).tenant : `${res.status}`;
  });

test("an agent's links cannot pair this browser with another tenant", async ({ browser }) => {
  await admin.call('POST', '/v1/tenants', { name: ATTACKER });
  await admin.call('POST', '/v1/boxes', { name: BOX, template: 'echo' });
  boxesMade.add(BOX);
  const { url, code } = pairing();

  const context = await browser.newContext(phone);
  const watched = watchConsole(context);
  watched.expect(signedOutProbe, 'the signed-out session probe');
  const page = await context.newPage();
  await page.goto(`${BASE}/`);
  await page.getByLabel('API key').fill(ADMIN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('button', { name: 'New box' }).waitFor();
  const mine = await tenantOf(page);
  check(mine !== ATTACKER && !/^\d+$/.test(mine), `signed in as ${mine}`);

  // The echo harness answers `echo: ` and the message: the answer is markdown of the box's.
  await openChat(page, BOX);
  const words = [
    'links 5e',
    `[Tap here](#/pair/${code})`,
    '[rel](/v1/boxes)',
    `[abs](${BASE}/#/pair/${code})`,
    '[again](#/signin)',
    `[files](#/boxes/${BOX}/files)`,
    '[site](https://example.com/)',
    `![pic](/v1/boxes/${BOX}/files?path=/memory/pic.png)`,
  ].join(' ');
  await send(page, words);
  await shows(page, 'echo: links 5e');
  const answer = log(page).getByRole('article', { name: 'Agent' }).filter({ hasText: 'echo: links 5e' });
  // The attack: a tap on the link. It leads nowhere: the session is the same.
  await answer.locator('a', { hasText: 'Tap here' }).click();
  await page.waitForTimeout(1000);
  check((await tenantOf(page)) === mine, `after a tap on the agent's link the browser is signed in as ${await tenantOf(page)}`);

  const href = (text) => answer.locator('a', { hasText: text }).getAttribute('href');
  for (const text of ['Tap here', 'rel', 'abs', 'again']) {
    const got = await href(text);
    check(got === null, `the answer's "${text}" link leads to ${got}`);
  }
  check((await href('files')) === `#/boxes/${BOX}/files`, `a link to the box's files leads to ${await href('files')}`);
  check((await href('site')) === 'https://example.com/', `a link out leads to ${await href('site')}`);
  const src = await answer.locator('img').getAttribute('src');
  check(src === null, `the answer's picture loads ${src}`);

  // Defence in depth: a pairing link reached inside a signed-in page asks first.
  const chat = page.url();
  await page.evaluate((c) => { location.hash = `#/pair/${c}`; }, code);
  const title = page.getByRole('heading', { name: 'Sign in again?' });
  await title.waitFor();
  const shown = await page.locator('main').innerText();
  check(shown.includes('This pairing link would sign this browser in again, replacing your current session.'), `the screen says: ${shown}`);
  check(!page.url().includes(code), `the code is in the address: ${page.url()}`);
  const problems = await screen(page, SHOTS, 'pair-confirm');
  check(problems.length === 0, `axe-core:\n  ${problems.join('\n  ')}`);
  await page.getByRole('button', { name: 'Cancel' }).click();
  await page.getByRole('list', { name: 'Boxes' }).getByRole('link', { name: BOX, exact: true }).waitFor();
  check(page.url().endsWith('#/boxes'), `Cancel led to ${page.url()}`);
  check((await tenantOf(page)) === mine, `after Cancel the browser is signed in as ${await tenantOf(page)}`);
  // No entry of the history holds the code: back is the chat.
  await page.goBack();
  await page.waitForURL(chat);
  await page.goForward();
  check(!page.url().includes(code), `the code is in the history: ${page.url()}`);

  // The code was never sent: opened in a fresh browser, as berth pair meant, it signs in.
  const fresh = await browser.newContext(phone);
  const freshConsole = watchConsole(fresh);
  const other = await fresh.newPage();
  await other.goto(url);
  await other.getByRole('button', { name: 'New box' }).waitFor();
  check((await tenantOf(other)) === ATTACKER, `the unused code signed the fresh browser in as ${await tenantOf(other)}`);
  await fresh.close();
  check(freshConsole.errors.length === 0, `console errors:\n  ${freshConsole.errors.join('\n  ')}`);

  // Continue does sign in again, with a code of its own; the address never holds it.
  const second = pairing();
  await page.evaluate((c) => { location.hash = `#/pair/${c}`; }, second.code);
  await title.waitFor();
  await page.getByRole('button', { name: 'Continue' }).click();
  await until('the session replaced', 15_000, async () => (await tenantOf(page)) === ATTACKER);
  await page.getByRole('button', { name: 'New box' }).waitFor();
  check(!page.url().includes(second.code), `the code is in the address: ${page.url()}`);

  await context.close();
  check(watched.errors.length === 0, `console errors:\n  ${watched.errors.join('\n  ')}`);
});
